"""The ampd server library's sources, shared by //server:server_lib and the
build of the same server against the CUDA emulator (//tests/server:ampd_emu)."""

SERVER_SRCS = [
    "artifact_service.cc",
    "auth.cc",
    "job_manager.cc",
    "log.cc",
    "precision_service.cc",
    "profile_store.cc",
    "rpc_status.cc",
    "server.cc",
    "sqlite_job_store.cc",
    "training_service.cc",
    "uploads.cc",
]

SERVER_HDRS = [
    "artifact_service.h",
    "auth.h",
    "job_manager.h",
    "log.h",
    "precision_service.h",
    "profile_store.h",
    "rpc_status.h",
    "job_store.h",
    "server.h",
    "training_service.h",
    "uploads.h",
]

# Everything but the CUDA backend, which each build picks.
SERVER_DEPS = [
    "//engine/cpu",
    "//engine/io:atomic_file",
    "//engine/io:checkpoint",
    "//engine/io:sha256",
    "//engine/io:tensorboard",
    "//engine/optim",
    "//engine/runner:job_spec",
    "//engine/train",
    "//proto:ampd_proto",
    "//proto:rpc_status_proto",
    "@system//:absl",
    "@system//:grpcpp",
    "@system//:grpcpp_reflection",
    "@system//:sqlite3",
]
