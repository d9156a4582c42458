#include "server/agents/grpc_store.h"

#include "absl/strings/str_cat.h"
#include "server/flag_file.h"

namespace ampd::server::agents {
namespace {

namespace v1 = ::ampd::v1;

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

class Store : public engine::dist::RendezvousStore {
 public:
  Store(std::shared_ptr<grpc::Channel> channel, std::string token, std::string job, int64_t attempt)
      : stub_(v1::AgentService::NewStub(channel)),
        token_(std::move(token)),
        job_(std::move(job)),
        attempt_(attempt) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    grpc::ClientContext ctx;
    Authorize(&ctx, token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::StoreSetRequest req;
    req.set_job(job_);
    req.set_attempt(attempt_);
    req.set_key(key);
    req.set_value(value);
    google::protobuf::Empty out;
    grpc::Status s = stub_->StoreSet(&ctx, req, &out);
    return s.ok() ? absl::OkStatus() : FromGrpc(s, absl::StrCat("rendezvous store: setting ", key));
  }

  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    grpc::ClientContext ctx;
    Authorize(&ctx, token_);
    // The server waits up to the timeout; the call gets a little longer.
    ctx.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(10));
    v1::StoreGetRequest req;
    req.set_job(job_);
    req.set_attempt(attempt_);
    req.set_key(key);
    req.set_timeout_ms(timeout.count());
    v1::StoreGetResponse out;
    grpc::Status s = stub_->StoreGet(&ctx, req, &out);
    if (!s.ok()) return FromGrpc(s, absl::StrCat("rendezvous store: waiting for ", key));
    return out.value();
  }

 private:
  std::unique_ptr<v1::AgentService::Stub> stub_;
  std::string token_;
  std::string job_;
  int64_t attempt_;
};

}  // namespace

std::shared_ptr<grpc::Channel> AgentChannel(const std::string& server, const AgentTls& tls,
                                            std::string* error) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  if (tls.cert.empty() != tls.key.empty()) {
    *error = "--tls_cert and --tls_key must be given together";
    return nullptr;
  }
  if (tls.ca.empty()) {
    if (!tls.cert.empty()) {
      *error = "--tls_cert needs --tls_ca (the CA that signed the server's certificate)";
      return nullptr;
    }
    return grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args);
  }
  auto read = [&](const char* flag, const std::string& path, std::string* out) {
    absl::StatusOr<std::string> pem = ReadFlagFile(flag, path);
    if (!pem.ok()) {
      *error = std::string(pem.status().message());
      return false;
    }
    *out = *std::move(pem);
    return true;
  };
  grpc::SslCredentialsOptions ssl;
  if (!read("--tls_ca", tls.ca, &ssl.pem_root_certs)) return nullptr;
  if (!tls.cert.empty() && (!read("--tls_cert", tls.cert, &ssl.pem_cert_chain) ||
                            !read("--tls_key", tls.key, &ssl.pem_private_key))) {
    return nullptr;
  }
  return grpc::CreateCustomChannel(server, grpc::SslCredentials(ssl), args);
}

void Authorize(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

std::shared_ptr<engine::dist::RendezvousStore> GrpcStore(std::shared_ptr<grpc::Channel> channel,
                                                         std::string token, std::string job,
                                                         int64_t attempt) {
  return std::make_shared<Store>(std::move(channel), std::move(token), std::move(job), attempt);
}

}  // namespace ampd::server::agents
