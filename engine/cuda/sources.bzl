"""engine/cuda's source lists, once: the CUDA build (engine/cuda/BUILD), the
CPU emulator's (tests/engine/cuda/emu/BUILD) and the architecture check
(tests/engine/cuda/BUILD) all use them."""

# The kernel families (kernels/<family>.cu, each with its launchers).
CUDA_KERNEL_FAMILIES = [
    "amp",
    "attention",
    "batch_norm",
    "elementwise",
    "embedding",
    "fp8",
    "layer_norm",
    "optimizers",
    "optimizers8bit",
    "pooling",
    "reductions",
    "softmax",
]

# Everything nvcc compiles.
CUDA_SOURCES = [
    "conv.cu",
    "gemm.cu",
    "runtime.cu",
] + ["kernels/%s.cu" % f for f in CUDA_KERNEL_FAMILIES]

# The backend's class and its kernels' registrations, one file per family
# (cuda_backend_impl.h), as engine/cpu.
CUDA_BACKEND_SRCS = [
    "attention.cc",
    "batch_norm.cc",
    "conv.cc",
    "cuda_backend.cc",
    "cuda_backend_impl.h",
    "data_sheet.cc",
    "device_amp.cc",
    "elementwise.cc",
    "embedding.cc",
    "fp8.cc",
    "layer_norm.cc",
    "matmul.cc",
    "optimizers8bit.cc",
    "pooling.cc",
    "reductions.cc",
    "softmax.cc",
]
