#ifndef AMPD_ENGINE_CPU_HOST_MEMORY_H_
#define AMPD_ENGINE_CPU_HOST_MEMORY_H_

// How a training process uses the C library's allocator. A CPU step frees
// activations of tens of megabytes and allocates the same sizes again in the
// next step. glibc serves blocks above 32 MiB (its largest mmap threshold)
// with fresh mmaps, so every step page-faults its activations in anew and
// the kernel zeroes them: a fifth to a third of a convnet's step here
// (bench/README.md, cnn_bench). Keeping freed memory in the heap is what
// PyTorch's caching allocators do for GPUs.

namespace ampd::engine::cpu {

// From now on, large blocks come from the heap and freed memory stays
// mapped for the next step (M_MMAP_MAX 0, a high M_TRIM_THRESHOLD). For a
// process that trains (ampd, its workers, ampd_train, the benchmarks); call
// it once, early.
void KeepHostMemoryMapped();

// Gives the heap's free memory back to the system (malloc_trim): after a
// job, so that an idle server does not hold the last job's working set.
void ReturnFreeHostMemory();

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_HOST_MEMORY_H_
