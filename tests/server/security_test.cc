// Transport security, authentication and per-principal authorization, against
// a real ampd process. Certificates are made with the openssl CLI.
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "ampd/v1/artifact_service.grpc.pb.h"
#include "ampd/v1/precision_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "health.grpc.pb.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

int Shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A CA, a server certificate for localhost/127.0.0.1 and client certificates
// for "alice", "bob" and "rack-9" (an agent's), made once per test binary.
struct Certs {
  std::string dir;
  std::string Path(const std::string& name) const { return dir + "/" + name; }
};

const Certs& TestCerts() {
  static const Certs* certs = [] {
    auto* c = new Certs{TmpDir() + "/certs"};
    const std::string d = c->dir;
    Shell("mkdir -p " + d);
    WriteFile(d + "/server.ext", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script =
        "set -e; mkdir -p " + d + "; cd " + d + "; " + "openssl req -x509 " + key +
        " -keyout ca.key -out ca.pem -days 2 "
        "-subj /CN=ampd-test-ca 2>/dev/null; "
        "openssl req " +
        key +
        " -keyout server.key -out server.csr "
        "-subj /CN=localhost 2>/dev/null; "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out server.pem -days 2 -extfile server.ext 2>/dev/null; ";
    for (const std::string who : {"alice", "bob", "rack-9"}) {
      script += "openssl req " + key + " -keyout " + who + ".key -out " + who +
                ".csr -subj /CN=" + who + " 2>/dev/null; " + "openssl x509 -req -in " + who +
                ".csr -CA ca.pem -CAkey ca.key "
                "-CAcreateserial -out " +
                who + ".pem -days 2 2>/dev/null; ";
    }
    EXPECT_EQ(Shell("bash -c '" + script + "'"), 0) << script;
    return c;
  }();
  return *certs;
}

std::shared_ptr<grpc::Channel> TlsChannel(int port, const std::string& client = "") {
  const Certs& c = TestCerts();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(c.Path("ca.pem"));
  if (!client.empty()) {
    ssl.pem_cert_chain = ReadFile(c.Path(client + ".pem"));
    ssl.pem_private_key = ReadFile(c.Path(client + ".key"));
  }
  return grpc::CreateChannel("localhost:" + std::to_string(port), grpc::SslCredentials(ssl));
}

std::vector<std::string> TlsFlags(bool mtls) {
  const Certs& c = TestCerts();
  std::vector<std::string> flags = {"--tls_cert=" + c.Path("server.pem"),
                                    "--tls_key=" + c.Path("server.key")};
  if (mtls) flags.push_back("--tls_client_ca=" + c.Path("ca.pem"));
  return flags;
}

v1::JobSpec Spec(const std::string& json) {
  v1::JobSpec spec;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &spec).ok()) << json;
  return spec;
}

// Stubs on one channel; every call carries `token` (if any) and a deadline.
class Caller {
 public:
  Caller(std::shared_ptr<grpc::Channel> channel, std::string token = "")
      : token_(std::move(token)),
        training_(v1::TrainingService::NewStub(channel)),
        precision_(v1::PrecisionService::NewStub(channel)),
        artifacts_(v1::ArtifactService::NewStub(channel)) {}

  std::unique_ptr<grpc::ClientContext> Ctx() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
    return ctx;
  }

  grpc::Status Create(v1::Job* job, const std::string& request_id = "",
                      const std::string& precision = "32-true") {
    v1::CreateJobRequest req;
    *req.mutable_spec() = Spec(TinyJobJson(20, precision));
    req.set_request_id(request_id);
    return training_->CreateJob(Ctx().get(), req, job);
  }
  grpc::Status Get(const std::string& name, v1::Job* job = nullptr) {
    v1::GetJobRequest req;
    req.set_name(name);
    v1::Job ignored;
    return training_->GetJob(Ctx().get(), req, job ? job : &ignored);
  }
  grpc::Status List(std::vector<std::string>* names) {
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    grpc::Status s = training_->ListJobs(Ctx().get(), req, &resp);
    if (names) {
      for (const auto& j : resp.jobs()) names->push_back(j.name());
    }
    return s;
  }
  grpc::Status Cancel(const std::string& name) {
    v1::CancelJobRequest req;
    req.set_name(name);
    v1::Job job;
    return training_->CancelJob(Ctx().get(), req, &job);
  }
  grpc::Status Delete(const std::string& name) {
    v1::DeleteJobRequest req;
    req.set_name(name);
    google::protobuf::Empty e;
    return training_->DeleteJob(Ctx().get(), req, &e);
  }
  // Reads the whole stream; returns its status.
  grpc::Status Stream(const std::string& name) {
    v1::StreamMetricsRequest req;
    req.set_name(name);
    auto ctx = Ctx();
    auto reader = training_->StreamMetrics(ctx.get(), req);
    v1::MetricsEvent event;
    while (reader->Read(&event)) {
    }
    return reader->Finish();
  }
  grpc::Status Generate(const std::string& name) {
    v1::GenerateRequest req;
    req.set_name(name);
    req.set_prompt("x");
    auto ctx = Ctx();
    auto reader = training_->Generate(ctx.get(), req);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    return reader->Finish();
  }
  grpc::Status ListArtifacts(const std::string& name) {
    v1::ListArtifactsRequest req;
    req.set_job(name);
    v1::ListArtifactsResponse resp;
    return artifacts_->ListArtifacts(Ctx().get(), req, &resp);
  }
  grpc::Status Download(const std::string& name) {
    v1::DownloadArtifactRequest req;
    req.set_job(name);
    auto ctx = Ctx();
    auto reader = artifacts_->DownloadArtifact(ctx.get(), req);
    v1::ArtifactChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }
  grpc::Status Explain() {
    v1::ExplainPrecisionRequest req;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(
                    R"({"model": {"mlp": {"hidden": [16]}},
                        "data": {"synthetic": {"numExamples": 64, "featureDim": 8,
                                               "numClasses": 3, "seed": 7}}})",
                    &req)
                    .ok());
    v1::ExplainPrecisionResponse resp;
    return precision_->ExplainPrecision(Ctx().get(), req, &resp);
  }
  grpc::Status CreateProfile(const std::string& id) {
    v1::CreateProfileRequest req;
    req.set_profile_id(id);
    req.mutable_profile()->mutable_config()->set_base("bf16-mixed");
    v1::PrecisionProfile p;
    return precision_->CreateProfile(Ctx().get(), req, &p);
  }
  grpc::Status GetProfile(const std::string& id) {
    v1::GetProfileRequest req;
    req.set_name("profiles/" + id);
    v1::PrecisionProfile p;
    return precision_->GetProfile(Ctx().get(), req, &p);
  }
  grpc::Status DeleteProfile(const std::string& id) {
    v1::DeleteProfileRequest req;
    req.set_name("profiles/" + id);
    google::protobuf::Empty e;
    return precision_->DeleteProfile(Ctx().get(), req, &e);
  }
  std::vector<std::string> ListProfiles() {
    v1::ListProfilesRequest req;
    v1::ListProfilesResponse resp;
    EXPECT_TRUE(precision_->ListProfiles(Ctx().get(), req, &resp).ok());
    std::vector<std::string> names;
    for (const auto& p : resp.profiles()) names.push_back(p.name());
    return names;
  }
  grpc::Status Capabilities(v1::Capabilities* caps = nullptr) {
    v1::GetCapabilitiesRequest req;
    v1::Capabilities ignored;
    return precision_->GetCapabilities(Ctx().get(), req, caps ? caps : &ignored);
  }
  grpc::Status CreateJson(const std::string& json, v1::Job* job) {
    v1::CreateJobRequest req;
    *req.mutable_spec() = Spec(json);
    return training_->CreateJob(Ctx().get(), req, job);
  }

 private:
  std::string token_;
  std::unique_ptr<v1::TrainingService::Stub> training_;
  std::unique_ptr<v1::PrecisionService::Stub> precision_;
  std::unique_ptr<v1::ArtifactService::Stub> artifacts_;
};

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Waits until the job has ended (so its model file exists).
void WaitEnded(Caller& caller, const std::string& name) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    v1::Job job;
    ASSERT_TRUE(caller.Get(name, &job).ok());
    if (job.state() == v1::SUCCEEDED || job.state() == v1::FAILED || job.state() == v1::CANCELLED) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL() << name << " did not end";
}

// ---------------------------------------------------------------- transport

TEST(SecurityTest, TlsRoundTrip) {
  AmpdProcess server(TlsFlags(false));
  ASSERT_TRUE(server.ok()) << server.log();
  Caller caller(TlsChannel(server.port()));
  EXPECT_TRUE(caller.Capabilities().ok());
  v1::Job job;
  grpc::Status s = caller.Create(&job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.owner(), "local");  // TLS alone does not identify callers
  EXPECT_TRUE(caller.Get(job.name()).ok());
}

TEST(SecurityTest, PlaintextClientToTlsServerFailsCleanly) {
  AmpdProcess server(TlsFlags(false));
  ASSERT_TRUE(server.ok()) << server.log();
  Caller caller(server.channel());  // plaintext
  EXPECT_EQ(caller.Capabilities().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(SecurityTest, MtlsRequiresAClientCertificate) {
  AmpdProcess server(TlsFlags(true));
  ASSERT_TRUE(server.ok()) << server.log();
  Caller anonymous(TlsChannel(server.port()));
  EXPECT_EQ(anonymous.Capabilities().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(SecurityTest, MtlsCertificateIdentityOwnsItsJobs) {
  AmpdProcess server(TlsFlags(true));
  ASSERT_TRUE(server.ok()) << server.log();
  Caller alice(TlsChannel(server.port(), "alice"));
  Caller bob(TlsChannel(server.port(), "bob"));
  v1::Job job;
  grpc::Status s = alice.Create(&job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_TRUE(alice.Get(job.name()).ok());
  EXPECT_EQ(bob.Get(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  std::vector<std::string> names;
  ASSERT_TRUE(bob.List(&names).ok());
  EXPECT_FALSE(Contains(names, job.name()));
  names.clear();
  ASSERT_TRUE(alice.List(&names).ok());
  EXPECT_TRUE(Contains(names, job.name()));
}

// Under mTLS an agent is a certificate the roles file names agent: it lends
// its slots and runs a rank of a user's job; a user's certificate cannot.
TEST(SecurityTest, MtlsAgentsAreCertificatesTheRolesFileNames) {
  const Certs& c = TestCerts();
  const std::string roles = TmpDir() + "/cert_roles.txt";
  WriteFile(roles, "# identity role\nrack-9 agent\nbob admin\n");
  std::vector<std::string> flags = TlsFlags(true);
  flags.push_back("--client_cert_roles=" + roles);
  flags.push_back("--cpu_workers=1");
  AmpdProcess server(flags);
  ASSERT_TRUE(server.ok()) << server.log();
  const std::string address = "localhost:" + std::to_string(server.port());
  auto agent = [&](const std::string& who) {
    return std::make_unique<AgentProcess>(
        std::vector<std::string>{
            "--server=" + address, "--name=" + who, "--data_dir=" + TmpDir() + "/agent-" + who,
            "--tls_ca=" + c.Path("ca.pem"), "--tls_cert=" + c.Path(who + ".pem"),
            "--tls_key=" + c.Path(who + ".key"), "--reconnect_ms=0"},
        std::map<std::string, std::string>{});
  };
  std::unique_ptr<AgentProcess> user = agent("alice");
  EXPECT_EQ(user->Wait(std::chrono::seconds(30)), 1);
  EXPECT_NE(user->log().find("PERMISSION_DENIED"), std::string::npos) << user->log();

  std::unique_ptr<AgentProcess> rack = agent("rack-9");
  Caller alice(TlsChannel(server.port(), "alice"));
  Caller rack_as_client(TlsChannel(server.port(), "rack-9"));
  EXPECT_EQ(rack_as_client.Capabilities().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::Capabilities caps;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool listed = false;
  while (!listed && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(alice.Capabilities(&caps).ok());
    for (const v1::WorkerSlots& w : caps.workers()) listed |= w.host() == "agent:rack-9";
    if (!listed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(listed) << rack->log() << server.log();
  std::string json = TinyJobJson(40);
  json.replace(json.rfind('}'), 1, R"(, "resources": {"workers": 2}})");
  v1::Job job;
  grpc::Status s = alice.CreateJson(json, &job);
  ASSERT_TRUE(s.ok()) << s.error_message() << json;
  WaitEnded(alice, job.name());
  v1::Job done;
  ASSERT_TRUE(alice.Get(job.name(), &done).ok());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason() << rack->log();
  EXPECT_NE(rack->log().find("job " + job.id()), std::string::npos) << rack->log();
}

TEST(SecurityTest, TheCertificateRolesFileIsChecked) {
  const std::string roles = TmpDir() + "/bad_roles.txt";
  WriteFile(roles, "rack-9 agnet\n");
  std::vector<std::string> flags = TlsFlags(true);
  flags.push_back("--client_cert_roles=" + roles);
  AmpdProcess bad(flags);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.log().find("client_cert_roles: " + roles + ":1: role must be"), std::string::npos)
      << bad.log();
  // Roles come from the tokens file when there is one.
  AmpdProcess both({"--client_cert_roles=" + roles, "--tokens_file=" + roles});
  EXPECT_FALSE(both.ok());
  EXPECT_NE(both.log().find("--client_cert_roles needs --tls_client_ca"), std::string::npos)
      << both.log();
}

TEST(SecurityTest, NonLoopbackWithoutTlsIsRefused) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  ASSERT_TRUE(srcdir && ws);
  const std::string log = TmpDir() + "/refused.log";
  const int rc =
      Shell(std::string(srcdir) + "/" + ws +
            "/server/ampd --listen=0.0.0.0:0 --data_dir=" + TmpDir() + "/refused_data 2> " + log);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(ReadFile(log).find("without TLS"), std::string::npos) << ReadFile(log);
}

TEST(SecurityTest, NonLoopbackWithInsecureStartsWithAWarning) {
  AmpdProcess server({"--listen=0.0.0.0:0", "--insecure"});
  ASSERT_TRUE(server.ok()) << server.log();
  EXPECT_NE(server.log().find("WITHOUT TLS"), std::string::npos) << server.log();
  Caller caller(server.channel());
  EXPECT_TRUE(caller.Capabilities().ok());
}

// ------------------------------------------------------------------- tokens

// sha256("alice-token") etc., computed with the openssl CLI.
std::string Sha256Hex(const std::string& text) {
  const std::string out = TmpDir() + "/sha.txt";
  EXPECT_EQ(Shell("printf '%s' '" + text + "' | openssl dgst -sha256 -r > " + out), 0);
  return ReadFile(out).substr(0, 64);
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(path_, "# test tokens\n" + Sha256Hex("alice-token") + " alice user\n" +
                         Sha256Hex("bob-token") + " bob user  # comment\n\n" +
                         Sha256Hex("root-token") + " root admin\n");
    server_ = std::make_unique<AmpdProcess>(std::vector<std::string>{"--tokens_file=" + path_});
    ASSERT_TRUE(server_->ok()) << server_->log();
  }
  // Stops the server and starts another on the same data dir.
  void Restart() {
    const std::string data_dir = server_->data_dir();
    ASSERT_EQ(server_->Stop(), 0);
    server_ =
        std::make_unique<AmpdProcess>(std::vector<std::string>{"--tokens_file=" + path_}, data_dir);
    ASSERT_TRUE(server_->ok()) << server_->log();
  }
  Caller As(const std::string& token) { return Caller(server_->channel(), token); }

  const std::string path_ = TmpDir() + "/tokens.txt";
  std::unique_ptr<AmpdProcess> server_;
};

TEST_F(TokenTest, MissingOrWrongTokenIsUnauthenticatedEverywhere) {
  Caller alice = As("alice-token");
  v1::Job job;
  ASSERT_TRUE(alice.Create(&job).ok());
  WaitEnded(alice, job.name());
  for (const std::string token : {"", "wrong-token"}) {
    SCOPED_TRACE("token=\"" + token + "\"");
    Caller c = As(token);
    v1::Job created;
    std::vector<std::string> names;
    const std::vector<std::pair<std::string, grpc::Status>> calls = {
        {"CreateJob", c.Create(&created)},
        {"GetJob", c.Get(job.name())},
        {"ListJobs", c.List(&names)},
        {"CancelJob", c.Cancel(job.name())},
        {"StreamMetrics", c.Stream(job.name())},
        {"ListArtifacts", c.ListArtifacts(job.name())},
        {"DownloadArtifact", c.Download(job.name())},
        {"Generate", c.Generate(job.name())},
        {"ExplainPrecision", c.Explain()},
        {"CreateProfile", c.CreateProfile("sneaky")},
        {"GetCapabilities", c.Capabilities()},
        {"DeleteJob", c.Delete(job.name())},
    };
    for (const auto& [rpc, status] : calls) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << rpc;
      EXPECT_EQ(status.error_message(), "missing or invalid bearer token") << rpc;
    }
    EXPECT_TRUE(names.empty());
  }
  EXPECT_TRUE(alice.Get(job.name()).ok());  // nothing above touched it
}

TEST_F(TokenTest, OtherUsersJobsAreNotFound) {
  Caller alice = As("alice-token");
  Caller bob = As("bob-token");
  Caller root = As("root-token");
  v1::Job job;
  ASSERT_TRUE(alice.Create(&job).ok());
  EXPECT_EQ(job.owner(), "alice");
  WaitEnded(alice, job.name());

  EXPECT_EQ(bob.Get(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bob.Cancel(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bob.Stream(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bob.ListArtifacts(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bob.Download(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bob.Generate(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(bob.Delete(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  std::vector<std::string> names;
  ASSERT_TRUE(bob.List(&names).ok());
  EXPECT_FALSE(Contains(names, job.name()));
  // The owner and an admin get past ownership to the job itself (an MLP:
  // nothing to generate from).
  EXPECT_EQ(alice.Generate(job.name()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(root.Generate(job.name()).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // The owner and an admin succeed.
  EXPECT_TRUE(alice.Get(job.name()).ok());
  EXPECT_TRUE(alice.Stream(job.name()).ok());
  EXPECT_TRUE(alice.ListArtifacts(job.name()).ok());
  grpc::Status download = alice.Download(job.name());
  EXPECT_TRUE(download.ok()) << download.error_message();
  names.clear();
  ASSERT_TRUE(alice.List(&names).ok());
  EXPECT_TRUE(Contains(names, job.name()));
  EXPECT_TRUE(root.Get(job.name()).ok());
  EXPECT_TRUE(root.ListArtifacts(job.name()).ok());
  names.clear();
  ASSERT_TRUE(root.List(&names).ok());
  EXPECT_TRUE(Contains(names, job.name()));
  EXPECT_TRUE(root.Delete(job.name()).ok());
  EXPECT_EQ(alice.Get(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(TokenTest, RequestIdsArePerPrincipal) {
  Caller alice = As("alice-token");
  Caller bob = As("bob-token");
  v1::Job a1, a2, b1;
  ASSERT_TRUE(alice.Create(&a1, "same-id").ok());
  ASSERT_TRUE(alice.Create(&a2, "same-id").ok());
  ASSERT_TRUE(bob.Create(&b1, "same-id").ok());
  EXPECT_EQ(a1.name(), a2.name());
  EXPECT_NE(a1.name(), b1.name());
  EXPECT_EQ(b1.owner(), "bob");
}

TEST_F(TokenTest, ProfilesAreOwned) {
  Caller alice = As("alice-token");
  Caller bob = As("bob-token");
  Caller root = As("root-token");
  ASSERT_TRUE(alice.CreateProfile("alice-mixed").ok());
  EXPECT_TRUE(alice.GetProfile("alice-mixed").ok());
  EXPECT_TRUE(Contains(alice.ListProfiles(), "profiles/alice-mixed"));
  EXPECT_EQ(bob.GetProfile("alice-mixed").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(Contains(bob.ListProfiles(), "profiles/alice-mixed"));
  EXPECT_TRUE(Contains(bob.ListProfiles(), "profiles/32-true"));  // built-ins are global
  EXPECT_EQ(bob.DeleteProfile("alice-mixed").error_code(), grpc::StatusCode::NOT_FOUND);
  v1::Job job;
  EXPECT_EQ(bob.Create(&job, "", "alice-mixed").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status s = alice.Create(&job, "", "alice-mixed");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(root.GetProfile("alice-mixed").ok());
  EXPECT_TRUE(alice.DeleteProfile("alice-mixed").ok());
}

TEST_F(TokenTest, PersistedJobsKeepTheirOwner) {
  v1::Job job;
  {
    Caller alice = As("alice-token");
    ASSERT_TRUE(alice.Create(&job, "persisted").ok());
    WaitEnded(alice, job.name());
  }
  Restart();
  Caller alice = As("alice-token");
  Caller bob = As("bob-token");
  v1::Job got;
  ASSERT_TRUE(alice.Get(job.name(), &got).ok());
  EXPECT_EQ(got.owner(), "alice");
  EXPECT_EQ(bob.Get(job.name()).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::Job again;
  ASSERT_TRUE(alice.Create(&again, "persisted").ok());  // idempotent across restarts
  EXPECT_EQ(again.name(), job.name());
}

TEST_F(TokenTest, HealthNeedsNoToken) {
  auto health = grpc::health::v1::Health::NewStub(server_->channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(SecurityTest, BadTokensFileIsRefused) {
  const std::string path = TmpDir() + "/bad_tokens.txt";
  WriteFile(path, "not-a-hash alice user\n");
  AmpdProcess server({"--tokens_file=" + path});
  EXPECT_FALSE(server.ok());
  EXPECT_NE(server.log().find("SHA-256"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace ampd::testing
