// The CUDA backend: its instance and registration, memory (the caching
// allocator, pinned staging for copies) and each thread's stream and scratch.
// The kernels are in one file per family (see cuda_backend_impl.h).

#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/half.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/runtime.h"

namespace ampd::engine::cuda {

absl::Status CudaBackend::Ready() {
  std::call_once(probe_once_, [this] {
    int count = 0;
    std::string e = DeviceCount(&count);
    if (!e.empty()) {
      probe_ = absl::FailedPreconditionError(e);
    } else if (count == 0) {
      probe_ = absl::FailedPreconditionError("no CUDA device present");
    }
  });
  if (!probe_.ok()) return probe_;
  // A new job on this thread starts clean (an out-of-memory error is not
  // sticky; a sticky one will show up again at the first call). Threads that
  // only ask (RPC handlers) get no stream.
  ThreadContext& c = RawCtx();
  if (c.initialised) {
    c.error = absl::OkStatus();
    c.labels.clear();
    c.labels_on_device = Tensor();
  }
  return absl::OkStatus();
}

Tensor CudaBackend::Allocate(const std::vector<int64_t>& shape, DType dtype, bool zero) {
  auto impl = std::make_shared<engine::TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->device = engine::Device::kCuda;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  impl->numel = numel;
  ThreadContext& c = Ctx();
  const size_t bytes = std::max<int64_t>(1, numel) * engine::DTypeSize(dtype);
  void* p = nullptr;
  if (c.error.ok()) {
    absl::StatusOr<void*> got = allocator_.Allocate(bytes, c.stream);
    if (got.ok()) {
      p = *got;
      if (zero) Record(MemsetAsync(p, 0, bytes, c.stream));
    } else {
      Fail(got.status());
    }
  }
  CachingAllocator* alloc = &allocator_;
  impl->data =
      std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [alloc](uint8_t* q) { alloc->Free(q); });
  return Tensor(std::move(impl));
}

void CudaBackend::CopyInto(const Tensor& dst, const Tensor& src) {
  const bool dst_dev = dst.device() == engine::Device::kCuda;
  const bool src_dev = src.device() == engine::Device::kCuda;
  if (dst_dev && src_dev) {
    if (Ok()) Record(LaunchConvert(src.raw(), Dt(src), dst.raw(), Dt(dst), dst.numel(), S()));
    return;
  }
  if (dst_dev) {  // host -> device: upload as it is, convert on the device
    if (src.dtype() == dst.dtype()) {
      Upload(dst.raw(), src.raw(), src.nbytes());
    } else {
      Tensor staged = Allocate(src.shape(), src.dtype(), false);
      Upload(staged.raw(), src.raw(), src.nbytes());
      CopyInto(dst, staged);
    }
    return;
  }
  // device -> host: convert on the device, then one read.
  Tensor from = src;
  if (src.dtype() != dst.dtype()) {
    from = Allocate(src.shape(), dst.dtype(), false);
    CopyInto(from, src);
  }
  Download(dst.raw(), from.raw(), from.nbytes());
}

std::vector<double> CudaBackend::ReadScalars(const std::vector<Tensor>& scalars) {
  ThreadContext& c = Ctx();
  std::vector<double> out(scalars.size(), 0.0);
  if (!Ok()) return out;
  if (!EnsureReadback(scalars.size() * 8)) return out;
  for (size_t i = 0; i < scalars.size(); ++i) {
    const size_t size = engine::DTypeSize(scalars[i].dtype());
    Record(MemcpyAsync(static_cast<char*>(c.readback) + i * 8, scalars[i].raw(), size,
                       CopyKind::kDeviceToHost, c.stream));
  }
  Record(StreamSynchronize(c.stream));
  if (!Ok()) return out;
  for (size_t i = 0; i < scalars.size(); ++i) {
    const char* p = static_cast<const char*>(c.readback) + i * 8;
    uint16_t h;
    float f;
    switch (scalars[i].dtype()) {
      case DType::kF32:
        std::memcpy(&f, p, 4);
        out[i] = f;
        break;
      case DType::kF64:
        std::memcpy(&out[i], p, 8);
        break;
      case DType::kF16:
        std::memcpy(&h, p, 2);
        out[i] = engine::core::F16BitsToF32(h);
        break;
      case DType::kBF16:
        std::memcpy(&h, p, 2);
        out[i] = engine::core::BF16BitsToF32(h);
        break;
      case DType::kU8:
        out[i] = static_cast<unsigned char>(*p);
        break;
    }
  }
  return out;
}

ThreadContext& CudaBackend::Ctx() {
  ThreadContext& ctx = RawCtx();
  if (!ctx.initialised) {
    ctx.initialised = true;
    std::string e = SetDevice(0);
    if (e.empty()) e = StreamCreate(&ctx.stream);
    for (auto& s : ctx.staging) {
      if (e.empty()) e = EventCreate(&s.done);
    }
    if (e.empty()) {
      absl::StatusOr<void*> scratch =
          allocator_.Allocate((kMaxReduceBlocks + 1) * sizeof(double), ctx.stream);
      if (scratch.ok()) {
        ctx.scratch = static_cast<double*>(*scratch);
      } else {
        e = std::string(scratch.status().message());
      }
    }
    if (!e.empty()) ctx.error = absl::InternalError("CUDA setup: " + e);
  }
  return ctx;
}

absl::StatusOr<void*> CudaBackend::MarkStream() {
  ThreadContext& c = Ctx();
  if (!Ok()) return c.error;
  const size_t slot = c.next_marker++ % kStreamMarkers;
  if (c.markers.size() <= slot) {
    Event e = nullptr;
    if (std::string err = EventCreateTimed(&e); !err.empty()) {
      return absl::InternalError("CUDA: " + err);
    }
    c.markers.push_back(e);
  }
  if (std::string err = EventRecord(c.markers[slot], c.stream); !err.empty()) {
    return absl::InternalError("CUDA: " + err);
  }
  return c.markers[slot];
}

absl::Status CudaBackend::WaitForMarker(void* marker) {
  ThreadContext& c = Ctx();
  if (!Ok()) return c.error;
  if (marker == nullptr) return absl::InvalidArgumentError("WaitForMarker: no marker");
  if (std::string err = StreamWaitEvent(c.stream, marker); !err.empty()) {
    return absl::InternalError("CUDA: " + err);
  }
  return absl::OkStatus();
}

bool CudaBackend::EnsureReadback(size_t bytes) {
  ThreadContext& c = Ctx();
  if (c.readback_bytes >= bytes) return true;
  if (c.readback) Record(FreeHost(c.readback));
  c.readback = nullptr;
  c.readback_bytes = 0;
  const size_t want = std::max<size_t>(bytes, 4096);
  std::string e = MallocHost(&c.readback, want);
  if (!e.empty()) {
    Record(e);
    return false;
  }
  c.readback_bytes = want;
  return true;
}

void CudaBackend::Upload(void* dst, const void* src, size_t bytes) {
  ThreadContext& c = Ctx();
  if (!Ok() || bytes == 0) return;
  ThreadContext::Staging& s = c.staging[c.next_staging];
  c.next_staging = (c.next_staging + 1) % 4;
  // The copy last queued from this buffer must have run before it is reused.
  Record(EventSynchronize(s.done));
  if (s.bytes < bytes) {
    if (s.host) Record(FreeHost(s.host));
    s.host = nullptr;
    s.bytes = 0;
    const size_t want = std::max<size_t>(bytes, 1 << 16);
    std::string e = MallocHost(&s.host, want);
    if (!e.empty()) return Record(e);
    s.bytes = want;
  }
  std::memcpy(s.host, src, bytes);
  Record(MemcpyAsync(dst, s.host, bytes, CopyKind::kHostToDevice, c.stream));
  Record(EventRecord(s.done, c.stream));
}

void CudaBackend::Download(void* dst, const void* src, size_t bytes) {
  ThreadContext& c = Ctx();
  if (!Ok() || bytes == 0) return;
  if (!EnsureReadback(bytes)) return;
  Record(MemcpyAsync(c.readback, src, bytes, CopyKind::kDeviceToHost, c.stream));
  Record(StreamSynchronize(c.stream));
  if (Ok()) std::memcpy(dst, c.readback, bytes);
}

Tensor CudaBackend::UploadIds(const std::vector<int32_t>& ids) {
  // Stored as f32-sized elements: an int32 tensor type is not needed elsewhere.
  Tensor t = Allocate({static_cast<int64_t>(ids.size())}, DType::kF32, false);
  Upload(t.raw(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

Tensor CudaBackend::UploadLabels(const std::vector<int32_t>& labels) {
  ThreadContext& c = Ctx();
  if (c.labels_on_device.defined() && c.labels == labels) return c.labels_on_device;
  Tensor t = UploadIds(labels);
  if (Ok()) {
    c.labels = labels;
    c.labels_on_device = t;  // read-only to every kernel, so safe to share
  }
  return t;
}

CudaBackend& CudaBackend::Instance() {
  static CudaBackend* backend = new CudaBackend();
  return *backend;
}

namespace {

CudaBackend* Instance() { return &CudaBackend::Instance(); }

// Registered like every backend, when linked in (the target is alwayslink).
// Safe without a GPU: nothing touches the device until a job asks, and jobs
// that ask for CUDA then get FAILED_PRECONDITION with the probe's reason.
[[maybe_unused]] const bool kRegistered =
    (engine::backend::RegisterBackend(engine::Device::kCuda, Instance()), true);

}  // namespace

std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  std::string e = DeviceCount(&count);
  if (!e.empty() || count == 0) {
    if (why_none) *why_none = e.empty() ? "no CUDA device present" : e;
    return out;
  }
  for (int i = 0; i < count; ++i) {
    DeviceProperties p;
    if (!GetDeviceProperties(i, &p).empty()) continue;
    CudaDeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.memory_bytes = p.total_memory;
    d.multiprocessors = p.multiprocessors;
    d.bf16 = p.major >= 8;
    d.f16 = p.major >= 7;
    d.fp8 = p.major > 8 || (p.major == 8 && p.minor >= 9);
    d.peak_bf16_flops = DataSheetBf16Flops(d.name);
    out.push_back(d);
  }
  return out;
}

AllocatorStats CudaMemoryStats() { return Instance()->stats(); }

void* CudaStreamForThisThread() { return Instance()->stream(); }

std::string SynchronizeThisThread() { return StreamSynchronize(Instance()->stream()); }

}  // namespace ampd::engine::cuda
