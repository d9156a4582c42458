#!/usr/bin/env bash
# Runs a test binary on the CUDA emulator with each block's threads in
# reverse order (see cudaemu::SetReverseThreadOrder).
set -euo pipefail
AMPD_CUDA_EMU_THREAD_ORDER=reverse exec "$@"
