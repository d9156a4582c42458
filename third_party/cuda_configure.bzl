"""Detects the CUDA toolkit and exposes it as @local_cuda.

When the toolkit is present (it is on every machine here), @local_cuda//:defs.bzl
sets CUDA_AVAILABLE = True and the cuda_library macro compiles .cu files with
nvcc. When it is absent, the same targets build their CPU fallbacks, exactly as
with --config=cpu.
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    available = nvcc.exists and ctx.path(root + "/include/cublasLt.h").exists
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    ctx.file("defs.bzl", "\n".join([
        "CUDA_AVAILABLE = %s" % available,
        'CUDA_PATH = "%s"' % root,
        'NVCC = "%s"' % (str(nvcc) if available else ""),
        "",
    ]))
    if not available:
        ctx.file("BUILD", "\n".join([
            'package(default_visibility = ["//visibility:public"])',
            'cc_library(name = "cudart")',
            'cc_library(name = "cublaslt")',
            'cc_library(name = "cudnn")',
            'cc_library(name = "nccl")',
            "",
        ]))
        return
    lib = root + "/lib64"

    # cuobjdump is not in every toolkit install; PyPI's nvidia-cuda-cuobjdump
    # (tools/packages.txt) provides it when the toolkit lacks it.
    cuobjdump = ctx.path(root + "/bin/cuobjdump")
    if not cuobjdump.exists:
        found = ctx.execute(["python3", "-c", "import glob, nvidia; print(next(iter(sorted(p for d in nvidia.__path__ for p in glob.glob(d + '/cu*/bin/cuobjdump'))), ''))"])
        cuobjdump = ctx.path(found.stdout.strip()) if found.return_code == 0 and found.stdout.strip() else None
    if cuobjdump:
        ctx.symlink(cuobjdump, "bin/cuobjdump")
    else:
        ctx.file("bin/cuobjdump", "#!/bin/sh\necho 'cuobjdump not found: run tools/setup (pip nvidia-cuda-cuobjdump)' >&2\nexit 1\n", executable = True)
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

exports_files(["bin/cuobjdump"])

cc_library(
    name = "cudart",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudart"],
)

cc_library(
    name = "cublaslt",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcublasLt", "-lcublas"],
    deps = [":cudart"],
)

cc_library(
    name = "cudnn",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lcudnn"],
    deps = [":cudart"],
)

cc_library(
    name = "nccl",
    linkopts = ["-L{lib}", "-Wl,-rpath,{lib}", "-lnccl"],
    deps = [":cudart"],
)
""".format(lib = lib))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
