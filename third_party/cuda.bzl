"""cuda_library: .cu files compiled by nvcc into an ordinary cc_library.

Code is built for Hopper (sm_90a SASS), Ampere (sm_80 SASS) and carries
compute_90 PTX so newer GPUs can JIT it. All CUDA API use stays inside the .cu
files; their headers are plain C++ so the rest of the tree never needs CUDA's
include directory. With --config=cpu, or when the toolkit is absent, the
library is built from `fallback_srcs` instead (which must report, not pretend).
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

CUDA_GENCODE = [
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=compute_90",
]

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC,-Wall,-Werror",
    "--Werror=all-warnings",
    "-I.",
]

def cuda_library(name, srcs, hdrs = [], cu_hdrs = [], fallback_srcs = [], deps = [], cuda_deps = [], visibility = None, **kwargs):
    """srcs: .cu files; cu_hdrs: headers only the .cu files include."""
    objs = []
    if CUDA_AVAILABLE:
        for src in srcs:
            obj = "_cuda_objs/%s/%s.o" % (name, src.replace(".cu", ""))
            native.genrule(
                name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
                srcs = [src] + hdrs + cu_hdrs,
                outs = [obj],
                cmd = " ".join([NVCC] + NVCC_FLAGS + CUDA_GENCODE + [
                    "-I$(GENDIR)",
                    "-c $(location %s)" % src,
                    "-o $@",
                ]),
                tags = ["cuda"],
                visibility = visibility,
            )
            objs.append(obj)
        native.cc_library(
            name = name,
            srcs = select({
                "//third_party:cuda_disabled": fallback_srcs,
                "//conditions:default": objs,
            }),
            hdrs = hdrs,
            deps = deps + select({
                "//third_party:cuda_disabled": [],
                "//conditions:default": ["@local_cuda//:cudart"] + cuda_deps,
            }),
            visibility = visibility,
            **kwargs
        )
    else:
        native.cc_library(
            name = name,
            srcs = fallback_srcs,
            hdrs = hdrs,
            deps = deps,
            visibility = visibility,
            **kwargs
        )


def cuda_select(if_cuda, if_not_cuda):
    """if_cuda when CUDA code is built (toolkit present, not --config=cpu)."""
    if not CUDA_AVAILABLE:
        return if_not_cuda
    return select({
        "//third_party:cuda_disabled": if_not_cuda,
        "//conditions:default": if_cuda,
    })
