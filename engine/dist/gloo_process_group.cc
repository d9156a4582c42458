// ProcessGroup over Gloo (Debian's libgloo-dev): TCP full mesh, Gloo's ring
// all-reduce. Gloo reports errors by throwing; every call here catches and
// returns a Status.

#include <algorithm>
#include <exception>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/dist/process_group.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace ampd::engine::dist {
namespace {

// One of Gloo's own stores (in-process, files).
class GlooStore : public RendezvousStore {
 public:
  explicit GlooStore(std::unique_ptr<gloo::rendezvous::Store> store) : store_(std::move(store)) {}
  gloo::rendezvous::Store& get() { return *store_; }

  absl::Status Set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<char>(value.begin(), value.end()));
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("rendezvous store: setting ", key, ": ", e.what()));
    }
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
      const std::vector<char> value = store_->get(key);
      return std::string(value.begin(), value.end());
    } catch (const std::exception& e) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous store: waiting for ", key, ": ", e.what()));
    }
  }

 private:
  std::unique_ptr<gloo::rendezvous::Store> store_;
};

// Any other RendezvousStore (the server's, over gRPC) as Gloo sees a store:
// Gloo's errors are exceptions, so a failed call throws one with its message.
class ForwardingStore : public gloo::rendezvous::Store {
 public:
  explicit ForwardingStore(RendezvousStore* store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    if (absl::Status s = store_->Set(key, std::string(data.begin(), data.end())); !s.ok()) {
      throw std::runtime_error(std::string(s.message()));
    }
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = store_->Get(key, kDefaultTimeout);
    if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& key : keys) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      absl::StatusOr<std::string> v =
          store_->Get(key, std::max(left, std::chrono::milliseconds(1)));
      if (!v.ok()) throw std::runtime_error(std::string(v.status().message()));
    }
  }

 private:
  RendezvousStore* store_;
};

// Gloo's messages say what failed (a timeout, a closed connection, a peer);
// the code says what a caller can do about it.
absl::Status FromException(const std::exception& e, int rank, const char* what) {
  std::string message = absl::StrCat(what, " failed on rank ", rank, ": ", e.what());
  const std::string text = e.what();
  if (text.find("imed out") != std::string::npos || text.find("imeout") != std::string::npos) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

template <typename T>
void Max(void* c, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = std::max(x[i], y[i]);
}

class GlooProcessGroup : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<gloo::rendezvous::Context> context,
                   std::chrono::milliseconds timeout)
      : context_(std::move(context)), timeout_(timeout) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  absl::Status AllReduceSum(float* data, int64_t n) override {
    return AllReduce(
        data, n, static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  }
  absl::Status AllReduceMax(float* data, int64_t n) override {
    return AllReduce(data, n, &Max<float>);
  }

  absl::Status Broadcast(float* data, int64_t n, int root) override {
    if (n < 0 || root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast of ", n, " elements from rank ",
                                                     root, " in a world of ", size()));
    }
    if (n == 0 || size() == 1) return absl::OkStatus();
    try {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, static_cast<size_t>(n));
      opts.setRoot(root);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(e, rank(), "broadcast");
    }
  }

  absl::Status Barrier() override {
    try {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(e, rank(), "barrier");
    }
  }

 private:
  absl::Status AllReduce(float* data, int64_t n,
                         void (*fn)(void*, const void*, const void*, size_t)) {
    if (n < 0) return absl::InvalidArgumentError("all-reduce of a negative element count");
    if (n == 0 || size() == 1) return absl::OkStatus();
    try {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, static_cast<size_t>(n));
      opts.setReduceFunction(fn);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(e, rank(), "all-reduce");
    }
  }

  // Every rank issues the same collectives in the same order, so a counter
  // gives matching tags; they keep one collective's messages from another's.
  uint32_t NextTag() { return tag_++; }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::chrono::milliseconds timeout_;
  uint32_t tag_ = 0;
};

}  // namespace

std::shared_ptr<RendezvousStore> InProcessStore() {
  return std::make_shared<GlooStore>(std::make_unique<gloo::rendezvous::HashStore>());
}

absl::StatusOr<std::shared_ptr<RendezvousStore>> FileStore(const std::string& directory) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous directory ", directory, ": ", ec.message()));
  }
  try {
    return std::shared_ptr<RendezvousStore>(
        std::make_shared<GlooStore>(std::make_unique<gloo::rendezvous::FileStore>(directory)));
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous directory ", directory, ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectGloo(const GlooOptions& o) {
  if (o.size < 1) return absl::InvalidArgumentError(absl::StrCat("world size ", o.size, " < 1"));
  if (o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is outside [0, ", o.size, ")"));
  }
  if (o.store == nullptr) return absl::InvalidArgumentError("no rendezvous store");
  auto* gloo_store = dynamic_cast<GlooStore*>(o.store.get());
  ForwardingStore forwarding(o.store.get());
  gloo::rendezvous::Store& store =
      gloo_store != nullptr ? gloo_store->get() : static_cast<gloo::rendezvous::Store&>(forwarding);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = o.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    context->setTimeout(o.timeout);
    gloo::rendezvous::PrefixStore prefixed(o.prefix, store);
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<ProcessGroup>(new GlooProcessGroup(std::move(context), o.timeout));
  } catch (const std::exception& e) {
    return FromException(e, o.rank, "connecting the Gloo group");
  }
}

}  // namespace ampd::engine::dist
