// TrainingService.Generate against a real ampd process: text streamed from a
// trained byte-level GPT (same seed, same text; greedy twice, the same),
// from its final weights or a checkpoint; every bad argument named; a job
// without weights, or not a GPT, FAILED_PRECONDITION; the server's limit;
// and a cancelled call that stops at once and frees its slot.
#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "ampd/v1/artifact_service.grpc.pb.h"
#include "ampd/v1/training_service.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace v1 = ::ampd::v1;
using std::chrono::milliseconds;

constexpr char kGpt[] = R"({"model": {"gpt": {"blockSize": "16", "nLayer": "1", "nHead": "2",
    "nEmbd": "32"}}, "data": {"builtin": "fortunes"}, "precision": {"profile": "bf16-mixed"},
    "training": {"steps": "30", "batchSize": "4", "evalInterval": "30"}})";

std::vector<std::string> ViolatedFields(const grpc::Status& s) {
  google::rpc::Status details;
  details.ParseFromString(s.error_details());
  std::vector<std::string> fields;
  for (const auto& any : details.details()) {
    google::rpc::BadRequest bad;
    if (any.UnpackTo(&bad)) {
      for (const auto& v : bad.field_violations()) fields.push_back(v.field());
    }
  }
  return fields;
}

struct Generated {
  grpc::Status status;
  std::vector<v1::GenerateResponse> responses;
  std::string text;
  std::vector<int32_t> tokens;
};

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }
  void Start(std::vector<std::string> flags) {
    server_ = std::make_unique<AmpdProcess>(std::move(flags));
    ASSERT_TRUE(server_->ok()) << server_->log();
    stub_ = v1::TrainingService::NewStub(server_->channel());
  }

  v1::Job Create(const std::string& json) {
    grpc::ClientContext ctx;
    v1::CreateJobRequest req;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, req.mutable_spec()).ok());
    v1::Job job;
    grpc::Status s = stub_->CreateJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }
  v1::Job WaitFor(const std::string& name, std::set<v1::JobState> states) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
    v1::Job job;
    while (std::chrono::steady_clock::now() < deadline) {
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_name(name);
      stub_->GetJob(&ctx, req, &job);
      if (states.count(job.state())) return job;
      std::this_thread::sleep_for(milliseconds(20));
    }
    ADD_FAILURE() << name << " stuck in " << v1::JobState_Name(job.state());
    return job;
  }
  // A trained GPT, once per test.
  v1::Job Trained() {
    v1::Job job = Create(kGpt);
    const v1::Job done = WaitFor(job.name(), {v1::SUCCEEDED, v1::FAILED});
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
    return job;
  }
  // Reads the whole stream (or `max_responses`, then cancels).
  Generated Generate(const v1::GenerateRequest& req, int max_responses = 1 << 30) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
    auto reader = stub_->Generate(&ctx, req);
    Generated g;
    v1::GenerateResponse r;
    while (static_cast<int>(g.responses.size()) < max_responses && reader->Read(&r)) {
      g.responses.push_back(r);
      g.text += r.text();
      g.tokens.insert(g.tokens.end(), r.tokens().begin(), r.tokens().end());
    }
    if (static_cast<int>(g.responses.size()) >= max_responses) ctx.TryCancel();
    g.status = reader->Finish();
    return g;
  }
  static v1::GenerateRequest Request(const v1::Job& job, const std::string& prompt) {
    v1::GenerateRequest req;
    req.set_name(job.name());
    req.set_prompt(prompt);
    req.set_max_new_tokens(40);
    return req;
  }

  std::unique_ptr<AmpdProcess> server_;
  std::unique_ptr<v1::TrainingService::Stub> stub_;
};

TEST_F(GenerateTest, StreamsTextOneSeedOneText) {
  const v1::Job job = Trained();
  v1::GenerateRequest req = Request(job, "The ");
  req.set_seed(7);
  req.set_top_k(40);
  const Generated a = Generate(req);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_GE(a.responses.size(), 2u);
  EXPECT_EQ(a.responses.front().artifact(), "model.safetensors");
  EXPECT_EQ(a.responses.front().seed(), 7u);
  EXPECT_TRUE(a.responses.front().byte_level());
  EXPECT_TRUE(a.responses.back().done());
  EXPECT_EQ(a.responses.back().tokens_generated(), 40);
  EXPECT_GT(a.responses.back().tokens_per_second(), 0);
  EXPECT_EQ(a.tokens.size(), 40u);
  // Byte-level: the text is those bytes (whole characters; U+FFFD for bytes
  // that are not UTF-8).
  std::string bytes(a.tokens.begin(), a.tokens.end());
  bool ascii = true;
  for (int32_t t : a.tokens) ascii = ascii && t < 128;
  if (ascii) {
    EXPECT_EQ(a.text, bytes);
  }
  EXPECT_FALSE(a.text.empty());
  const Generated b = Generate(req);
  EXPECT_EQ(b.tokens, a.tokens);
  req.set_seed(8);
  EXPECT_NE(Generate(req).tokens, a.tokens);
  // No seed: a random one, reported, that reproduces the text.
  req.clear_seed();
  const Generated c = Generate(req);
  ASSERT_TRUE(c.status.ok());
  req.set_seed(c.responses.front().seed());
  EXPECT_EQ(Generate(req).tokens, c.tokens);
  // Greedy: the same twice, whatever the seed.
  req.set_temperature(0);
  req.set_seed(1);
  const Generated g1 = Generate(req);
  req.set_seed(2);
  EXPECT_EQ(Generate(req).tokens, g1.tokens);
  // Token ids work for a byte-level model too (they are bytes).
  v1::GenerateRequest ids = req;
  ids.clear_prompt();
  for (char ch : std::string("The ")) ids.add_prompt_tokens(ch);
  EXPECT_EQ(Generate(ids).tokens, g1.tokens);
}

TEST_F(GenerateTest, FromACheckpoint) {
  Start({"--checkpoint_every_steps=10"});
  const v1::Job job = Create(kGpt);
  ASSERT_EQ(WaitFor(job.name(), {v1::SUCCEEDED, v1::FAILED}).state(), v1::SUCCEEDED);
  auto artifacts = v1::ArtifactService::NewStub(server_->channel());
  grpc::ClientContext ctx;
  v1::ListArtifactsRequest lr;
  lr.set_job(job.name());
  v1::ListArtifactsResponse list;
  ASSERT_TRUE(artifacts->ListArtifacts(&ctx, lr, &list).ok());
  std::string checkpoint;
  for (const auto& a : list.artifacts()) {
    if (a.name().rfind("checkpoints/", 0) == 0) checkpoint = a.name();
  }
  ASSERT_FALSE(checkpoint.empty()) << list.DebugString();
  v1::GenerateRequest req = Request(job, "A");
  req.set_artifact(checkpoint);
  req.set_temperature(0);
  const Generated g = Generate(req);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.responses.front().artifact(), checkpoint);
  EXPECT_EQ(g.tokens.size(), 40u);
  req.set_artifact("checkpoints/step-00009999.safetensors");
  EXPECT_EQ(Generate(req).status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GenerateTest, BadArgumentsNameTheField) {
  const v1::Job job = Trained();
  auto field_of = [&](const v1::GenerateRequest& req) {
    const Generated g = Generate(req);
    EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << g.status.error_message();
    EXPECT_TRUE(g.responses.empty());
    const std::vector<std::string> f = ViolatedFields(g.status);
    return f.empty() ? std::string("(none): ") + g.status.error_message() : f[0];
  };
  v1::GenerateRequest req = Request(job, "x");
  req.add_prompt_tokens(1);
  EXPECT_EQ(field_of(req), "prompt");
  req = Request(job, "");
  EXPECT_EQ(field_of(req), "prompt");
  req = Request(job, "");
  req.add_prompt_tokens(300);  // over the byte vocabulary
  EXPECT_EQ(field_of(req), "prompt");
  req = Request(job, "x");
  req.set_max_new_tokens(-1);
  EXPECT_EQ(field_of(req), "max_new_tokens");
  req.set_max_new_tokens(100000);
  EXPECT_EQ(field_of(req), "max_new_tokens");
  req = Request(job, "x");
  req.set_temperature(-0.5);
  EXPECT_EQ(field_of(req), "temperature");
  req = Request(job, "x");
  req.set_top_p(1.5);
  EXPECT_EQ(field_of(req), "top_p");
  req = Request(job, "x");
  req.set_top_k(-3);
  EXPECT_EQ(field_of(req), "top_k");
  req = Request(job, "x");
  req.set_artifact("../../etc/passwd");
  EXPECT_EQ(field_of(req), "artifact");
  req = Request(job, "x");
  req.set_name("");
  EXPECT_EQ(field_of(req), "name");
  req = Request(job, "x");
  req.set_name("jobs/nope");
  EXPECT_EQ(Generate(req).status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GenerateTest, NoWeightsYetOrNoLanguageModelIsAFailedPrecondition) {
  const v1::Job mlp = Create(R"({"model": {"mlp": {"hidden": [8]}},
      "data": {"synthetic": {"numExamples": 64, "featureDim": 4, "numClasses": 2}},
      "training": {"steps": "2", "batchSize": "8"}})");
  ASSERT_EQ(WaitFor(mlp.name(), {v1::SUCCEEDED, v1::FAILED}).state(), v1::SUCCEEDED);
  Generated g = Generate(Request(mlp, "x"));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(g.status.error_message().find("model.gpt"), std::string::npos);
  // A long job, just started: no checkpoint and no final weights yet.
  const v1::Job running =
      Create(std::string(kGpt).replace(std::string(kGpt).find("\"30\""), 4, "\"100000\""));
  g = Generate(Request(running, "x"));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(g.status.error_message().find("no weights yet"), std::string::npos)
      << g.status.error_message();
  grpc::ClientContext ctx;
  v1::CancelJobRequest cancel;
  cancel.set_name(running.name());
  v1::Job ignored;
  stub_->CancelJob(&ctx, cancel, &ignored);
}

// With --max_generations=1: a second call while one runs is
// RESOURCE_EXHAUSTED; cancelling the first stops it at once (long before its
// 65536 tokens) and frees the slot.
TEST_F(GenerateTest, CancellingStopsAtOnceAndFreesTheSlot) {
  Start({"--max_generations=1"});
  const v1::Job job = Trained();
  v1::GenerateRequest longer = Request(job, "The ");
  longer.set_max_new_tokens(65536);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, longer);
  v1::GenerateResponse r;
  int read = 0;
  while (read < 5 && reader->Read(&r)) ++read;
  ASSERT_EQ(read, 5);
  const Generated second = Generate(Request(job, "x"));
  EXPECT_EQ(second.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(second.status.error_message().find("max_generations"), std::string::npos);
  const auto cancelled_at = std::chrono::steady_clock::now();
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The slot comes back within a token or two, not after 65536 of them.
  Generated again;
  do {
    std::this_thread::sleep_for(milliseconds(20));
    again = Generate(Request(job, "x"));
  } while (again.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
           std::chrono::steady_clock::now() - cancelled_at < std::chrono::seconds(10));
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - cancelled_at, std::chrono::seconds(5));
  EXPECT_NE(server_->log().find("\"msg\":\"generation done\""), std::string::npos);
}

}  // namespace
}  // namespace ampd::testing
