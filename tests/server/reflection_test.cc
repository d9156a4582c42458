// Does what grpcurl does against a real ampd process, with no generated ampd
// code linked in: list services over server reflection, describe a method from
// the descriptors the server sends, and invoke CreateJob from JSON through
// dynamic messages and a generic stub. Also checks that the descriptor set
// shipped with the protos describes the same service.
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "reflection.grpc.pb.h"
#include "tests/server/ampd_process.h"

namespace ampd::testing {
namespace {

namespace refl = ::grpc::reflection::v1alpha;
namespace pb = ::google::protobuf;

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir && ws) return std::string(srcdir) + "/" + ws + "/" + path;
  return path;
}

// One reflection stream, used request by request (as grpcurl does).
class ReflectionClient {
 public:
  explicit ReflectionClient(std::shared_ptr<grpc::Channel> channel)
      : stub_(refl::ServerReflection::NewStub(channel)) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream_ = stub_->ServerReflectionInfo(&ctx_);
  }

  ~ReflectionClient() {
    stream_->WritesDone();
    grpc::Status s = stream_->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  bool Call(const refl::ServerReflectionRequest& req, refl::ServerReflectionResponse* resp) {
    return stream_->Write(req) && stream_->Read(resp);
  }

  std::vector<std::string> ListServices() {
    refl::ServerReflectionRequest req;
    req.set_list_services("*");
    refl::ServerReflectionResponse resp;
    std::vector<std::string> names;
    if (!Call(req, &resp)) {
      ADD_FAILURE() << "reflection stream broke";
      return names;
    }
    EXPECT_TRUE(resp.has_list_services_response()) << resp.DebugString();
    const refl::ListServiceResponse list = resp.list_services_response();
    for (const refl::ServiceResponse& s : list.service()) names.push_back(s.name());
    return names;
  }

  // Adds the returned files to `files_`; returns false on an error response.
  bool Fetch(const refl::ServerReflectionRequest& req, std::string* error = nullptr) {
    refl::ServerReflectionResponse resp;
    if (!Call(req, &resp)) {
      if (error) *error = "reflection stream broke";
      return false;
    }
    if (resp.has_error_response()) {
      if (error) {
        *error = std::to_string(resp.error_response().error_code()) + ": " +
                 resp.error_response().error_message();
      }
      return false;
    }
    if (!resp.has_file_descriptor_response()) {
      if (error) *error = "unexpected response: " + resp.DebugString();
      return false;
    }
    const refl::FileDescriptorResponse files = resp.file_descriptor_response();
    for (const std::string& bytes : files.file_descriptor_proto()) {
      pb::FileDescriptorProto file;
      if (!file.ParseFromString(bytes)) {
        if (error) *error = "unparseable FileDescriptorProto";
        return false;
      }
      files_.emplace(file.name(), file);
    }
    return true;
  }

  // Loads the file defining `symbol`, and every file it imports, into `pool`.
  const pb::FileDescriptor* LoadSymbol(const std::string& symbol, pb::DescriptorPool* pool,
                                       std::string* error) {
    refl::ServerReflectionRequest req;
    req.set_file_containing_symbol(symbol);
    const std::set<std::string> before = Names();
    if (!Fetch(req, error)) return nullptr;
    // The first new file (or the one already fetched) that defines the symbol.
    for (const auto& [name, file] : files_) {
      if (before.count(name)) continue;
      if (Defines(file, symbol)) return Build(name, pool, error);
    }
    for (const auto& [name, file] : files_) {
      if (Defines(file, symbol)) return Build(name, pool, error);
    }
    if (error) *error = "no returned file defines " + symbol;
    return nullptr;
  }

  // Loads a file by name (file_by_filename), and its imports, into `pool`.
  const pb::FileDescriptor* LoadFile(const std::string& name, pb::DescriptorPool* pool,
                                     std::string* error) {
    return Build(name, pool, error);
  }

  int file_by_filename_requests() const { return file_by_filename_requests_; }

 private:
  std::set<std::string> Names() const {
    std::set<std::string> names;
    for (const auto& [name, file] : files_) names.insert(name);
    return names;
  }

  static bool Defines(const pb::FileDescriptorProto& file, const std::string& symbol) {
    const std::string prefix = file.package().empty() ? "" : file.package() + ".";
    for (const auto& s : file.service()) {
      if (prefix + s.name() == symbol) return true;
    }
    for (const auto& m : file.message_type()) {
      if (prefix + m.name() == symbol) return true;
    }
    for (const auto& e : file.enum_type()) {
      if (prefix + e.name() == symbol) return true;
    }
    return false;
  }

  // Builds `name` into `pool` after its imports, fetching missing imports
  // with file_by_filename.
  const pb::FileDescriptor* Build(const std::string& name, pb::DescriptorPool* pool,
                                  std::string* error) {
    if (const pb::FileDescriptor* done = pool->FindFileByName(name)) return done;
    if (!files_.count(name)) {
      refl::ServerReflectionRequest req;
      req.set_file_by_filename(name);
      ++file_by_filename_requests_;
      if (!Fetch(req, error)) return nullptr;
      if (!files_.count(name)) {
        if (error) *error = "server did not return " + name;
        return nullptr;
      }
    }
    const pb::FileDescriptorProto file = files_.at(name);
    for (const std::string& dep : file.dependency()) {
      if (!Build(dep, pool, error)) return nullptr;
    }
    const pb::FileDescriptor* built = pool->BuildFile(file);
    if (!built && error) *error = "cannot build " + name;
    return built;
  }

  std::unique_ptr<refl::ServerReflection::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<refl::ServerReflectionRequest, refl::ServerReflectionResponse>>
      stream_;
  std::map<std::string, pb::FileDescriptorProto> files_;
  int file_by_filename_requests_ = 0;
};

// A unary call by method path with raw bytes, through a completion queue.
grpc::Status GenericUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                          const std::string& request, std::string* response) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  auto call = stub.PrepareUnaryCall(&ctx, method, request_buffer, &cq);
  if (!call) return grpc::Status(grpc::StatusCode::INTERNAL, "PrepareUnaryCall failed");
  call->StartCall();
  grpc::ByteBuffer response_buffer;
  grpc::Status status;
  int done_tag = 1;
  call->Finish(&response_buffer, &status, &done_tag);
  void* tag = nullptr;
  bool ok = false;
  const bool got = cq.Next(&tag, &ok);
  cq.Shutdown();
  void* ignored_tag;
  bool ignored_ok;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }
  if (!got || tag != &done_tag || !ok) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "completion queue: no result");
  }
  if (status.ok()) {
    grpc::Slice out;
    grpc::Status dumped = response_buffer.DumpToSingleSlice(&out);
    if (!dumped.ok()) return dumped;
    response->assign(reinterpret_cast<const char*>(out.begin()), out.size());
  }
  return status;
}

// protoc writes explicit json_name options into descriptor sets; the
// descriptors compiled into the server omit them (they are derived).
void StripJsonNames(pb::DescriptorProto* message) {
  for (pb::FieldDescriptorProto& field : *message->mutable_field()) field.clear_json_name();
  for (pb::DescriptorProto& nested : *message->mutable_nested_type()) StripJsonNames(&nested);
}

pb::FileDescriptorProto Comparable(const pb::FileDescriptor* file) {
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);  // no source info
  for (pb::DescriptorProto& message : *proto.mutable_message_type()) StripJsonNames(&message);
  return proto;
}

class ReflectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<AmpdProcess>();
    ASSERT_TRUE(server_->ok()) << server_->log();
  }
  std::unique_ptr<AmpdProcess> server_;
};

TEST_F(ReflectionTest, ListsTheServices) {
  ReflectionClient client(server_->channel());
  std::vector<std::string> names = client.ListServices();
  const std::set<std::string> got(names.begin(), names.end());
  for (const char* s : {"ampd.v1.TrainingService", "ampd.v1.PrecisionService",
                        "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_TRUE(got.count(s)) << "missing " << s;
  }
}

TEST_F(ReflectionTest, DescribesMethodsFromTheServersDescriptors) {
  ReflectionClient client(server_->channel());
  pb::DescriptorPool pool;
  std::string error;
  const pb::FileDescriptor* file = client.LoadSymbol("ampd.v1.TrainingService", &pool, &error);
  ASSERT_NE(file, nullptr) << error;
  EXPECT_EQ(file->name(), "ampd/v1/training_service.proto");
  const pb::ServiceDescriptor* service = pool.FindServiceByName("ampd.v1.TrainingService");
  ASSERT_NE(service, nullptr);
  const pb::MethodDescriptor* create = service->FindMethodByName("CreateJob");
  ASSERT_NE(create, nullptr);
  EXPECT_EQ(create->input_type()->full_name(), "ampd.v1.CreateJobRequest");
  EXPECT_EQ(create->output_type()->full_name(), "ampd.v1.Job");
  EXPECT_FALSE(create->client_streaming());
  EXPECT_FALSE(create->server_streaming());
  const pb::MethodDescriptor* stream = service->FindMethodByName("StreamMetrics");
  ASSERT_NE(stream, nullptr);
  EXPECT_TRUE(stream->server_streaming());
  EXPECT_EQ(stream->output_type()->full_name(), "ampd.v1.MetricsEvent");
  // Imported types resolved: the spec comes from job_spec.proto, times from
  // the well-known types.
  const pb::FieldDescriptor* spec = create->input_type()->FindFieldByName("spec");
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->message_type()->full_name(), "ampd.v1.JobSpec");
  EXPECT_EQ(spec->message_type()->file()->name(), "ampd/v1/job_spec.proto");
  const pb::FieldDescriptor* created = create->output_type()->FindFieldByName("create_time");
  ASSERT_NE(created, nullptr);
  EXPECT_EQ(created->message_type()->full_name(), "google.protobuf.Timestamp");
  ASSERT_NE(pool.FindServiceByName("ampd.v1.TrainingService")->FindMethodByName("DeleteJob"),
            nullptr);
  EXPECT_EQ(service->FindMethodByName("DeleteJob")->output_type()->full_name(),
            "google.protobuf.Empty");

  // The other service loads on the same stream (shared imports are reused).
  const pb::FileDescriptor* precision =
      client.LoadSymbol("ampd.v1.PrecisionService", &pool, &error);
  ASSERT_NE(precision, nullptr) << error;
  const pb::ServiceDescriptor* ps = pool.FindServiceByName("ampd.v1.PrecisionService");
  ASSERT_NE(ps, nullptr);
  ASSERT_NE(ps->FindMethodByName("ExplainPrecision"), nullptr);
  EXPECT_EQ(ps->FindMethodByName("ExplainPrecision")->output_type()->full_name(),
            "ampd.v1.ExplainPrecisionResponse");

  // By file name, as for an import, on a fresh stream and pool.
  {
    ReflectionClient by_name(server_->channel());
    pb::DescriptorPool by_name_pool;
    const pb::FileDescriptor* f =
        by_name.LoadFile("ampd/v1/precision_service.proto", &by_name_pool, &error);
    ASSERT_NE(f, nullptr) << error;
    EXPECT_GE(by_name.file_by_filename_requests(), 1);
    EXPECT_NE(by_name_pool.FindServiceByName("ampd.v1.PrecisionService"), nullptr);
    EXPECT_NE(by_name_pool.FindMessageTypeByName("ampd.v1.PrecisionConfig"), nullptr);
    std::string missing_error;
    EXPECT_EQ(by_name.LoadFile("ampd/v1/nope.proto", &by_name_pool, &missing_error), nullptr);
    EXPECT_NE(missing_error.find(std::to_string(static_cast<int>(grpc::StatusCode::NOT_FOUND))),
              std::string::npos)
        << missing_error;
  }

  // Unknown symbols are an error response, not a broken stream.
  refl::ServerReflectionRequest req;
  req.set_file_containing_symbol("ampd.v1.NoSuchService");
  refl::ServerReflectionResponse resp;
  ASSERT_TRUE(client.Call(req, &resp));
  ASSERT_TRUE(resp.has_error_response()) << resp.DebugString();
  EXPECT_EQ(resp.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
}

TEST_F(ReflectionTest, InvokesCreateJobFromJsonThroughDynamicMessages) {
  ReflectionClient client(server_->channel());
  pb::DescriptorPool pool;
  std::string error;
  ASSERT_NE(client.LoadSymbol("ampd.v1.TrainingService", &pool, &error), nullptr) << error;
  const pb::MethodDescriptor* method = pool.FindMethodByName("ampd.v1.TrainingService.CreateJob");
  ASSERT_NE(method, nullptr);

  pb::DynamicMessageFactory factory(&pool);
  std::unique_ptr<pb::Message> request(factory.GetPrototype(method->input_type())->New());
  const std::string json = "{\"spec\": " + TinyJobJson(5) + ", \"requestId\": \"r1\"}";
  auto parsed = pb::util::JsonStringToMessage(json, request.get());
  ASSERT_TRUE(parsed.ok()) << parsed.ToString() << "\n" << json;

  const std::string path = "/" + method->service()->full_name() + "/" + method->name();
  EXPECT_EQ(path, "/ampd.v1.TrainingService/CreateJob");
  std::string bytes;
  grpc::Status status =
      GenericUnary(server_->channel(), path, request->SerializeAsString(), &bytes);
  ASSERT_TRUE(status.ok()) << status.error_message();

  std::unique_ptr<pb::Message> job(factory.GetPrototype(method->output_type())->New());
  ASSERT_TRUE(job->ParseFromString(bytes));
  const pb::Descriptor* job_type = job->GetDescriptor();
  const pb::Reflection* reflection = job->GetReflection();
  const std::string name = reflection->GetString(*job, job_type->FindFieldByName("name"));
  EXPECT_EQ(name.rfind("jobs/", 0), 0u) << name;
  EXPECT_GT(name.size(), 5u);
  const pb::EnumValueDescriptor* state =
      reflection->GetEnum(*job, job_type->FindFieldByName("state"));
  ASSERT_NE(state, nullptr);
  EXPECT_TRUE(std::set<std::string>({"QUEUED", "RUNNING", "SUCCEEDED"}).count(state->name()))
      << state->name();
  EXPECT_EQ(reflection->GetString(*job, job_type->FindFieldByName("request_id")), "r1");
  const pb::Message& spec = reflection->GetMessage(*job, job_type->FindFieldByName("spec"));
  const pb::Message& training =
      spec.GetReflection()->GetMessage(spec, spec.GetDescriptor()->FindFieldByName("training"));
  EXPECT_EQ(training.GetReflection()->GetInt64(training,
                                               training.GetDescriptor()->FindFieldByName("steps")),
            5);

  // The response renders as JSON like grpcurl prints it.
  std::string out;
  ASSERT_TRUE(pb::util::MessageToJsonString(*job, &out).ok());
  EXPECT_NE(out.find("\"name\":\"" + name + "\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"requestId\":\"r1\""), std::string::npos) << out;

  // A retry with the same requestId is the same job (and the JSON path for
  // GetJob works the same way).
  std::string again;
  status = GenericUnary(server_->channel(), path, request->SerializeAsString(), &again);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::unique_ptr<pb::Message> job2(factory.GetPrototype(method->output_type())->New());
  ASSERT_TRUE(job2->ParseFromString(again));
  EXPECT_EQ(reflection->GetString(*job2, job_type->FindFieldByName("name")), name);

  const pb::MethodDescriptor* get = pool.FindMethodByName("ampd.v1.TrainingService.GetJob");
  ASSERT_NE(get, nullptr);
  std::unique_ptr<pb::Message> get_req(factory.GetPrototype(get->input_type())->New());
  ASSERT_TRUE(pb::util::JsonStringToMessage("{\"name\": \"" + name + "\"}", get_req.get()).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string final_state;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string got;
    status = GenericUnary(server_->channel(), "/ampd.v1.TrainingService/GetJob",
                          get_req->SerializeAsString(), &got);
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::unique_ptr<pb::Message> current(factory.GetPrototype(get->output_type())->New());
    ASSERT_TRUE(current->ParseFromString(got));
    final_state = reflection->GetEnum(*current, job_type->FindFieldByName("state"))->name();
    if (final_state != "QUEUED" && final_state != "RUNNING") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(final_state, "SUCCEEDED");

  // A bad request comes back as a status, as grpcurl would show it.
  std::unique_ptr<pb::Message> bad(factory.GetPrototype(method->input_type())->New());
  ASSERT_TRUE(
      pb::util::JsonStringToMessage(R"({"spec": {"training": {"steps": "-1"}}})", bad.get()).ok());
  std::string ignored;
  status = GenericUnary(server_->channel(), path, bad->SerializeAsString(), &ignored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("spec.training.steps"), std::string::npos)
      << status.error_message();
}

TEST_F(ReflectionTest, DescriptorSetDescribesTheSameService) {
  const std::string path = Runfile("proto/ampd_proto_descriptor_set.pb");
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  pb::FileDescriptorSet set;
  ASSERT_TRUE(set.ParseFromString(ss.str())) << path;
  pb::DescriptorPool from_set;
  for (const pb::FileDescriptorProto& file : set.file()) {
    if (from_set.FindFileByName(file.name())) continue;  // repeated imports
    ASSERT_NE(from_set.BuildFile(file), nullptr) << file.name();
  }
  ReflectionClient client(server_->channel());
  pb::DescriptorPool from_server;
  std::string error;
  ASSERT_NE(client.LoadSymbol("ampd.v1.TrainingService", &from_server, &error), nullptr) << error;
  ASSERT_NE(client.LoadSymbol("ampd.v1.PrecisionService", &from_server, &error), nullptr) << error;

  // Compared as descriptor protos, without source comments and json_name
  // options (both only in the set).
  for (const char* name : {"ampd.v1.TrainingService", "ampd.v1.PrecisionService"}) {
    const pb::ServiceDescriptor* a = from_set.FindServiceByName(name);
    const pb::ServiceDescriptor* b = from_server.FindServiceByName(name);
    ASSERT_NE(a, nullptr) << name;
    ASSERT_NE(b, nullptr) << name;
    EXPECT_EQ(a->DebugString(), b->DebugString()) << name;
    ASSERT_EQ(a->method_count(), b->method_count()) << name;
    for (int i = 0; i < a->method_count(); ++i) {
      EXPECT_EQ(a->method(i)->name(), b->method(i)->name());
      EXPECT_EQ(a->method(i)->input_type()->full_name(), b->method(i)->input_type()->full_name());
      EXPECT_EQ(a->method(i)->output_type()->full_name(), b->method(i)->output_type()->full_name());
      EXPECT_EQ(a->method(i)->server_streaming(), b->method(i)->server_streaming());
    }
  }
  for (const char* file : {"ampd/v1/training_service.proto", "ampd/v1/precision_service.proto",
                           "ampd/v1/job_spec.proto"}) {
    const pb::FileDescriptor* a = from_set.FindFileByName(file);
    const pb::FileDescriptor* b = from_server.FindFileByName(file);
    ASSERT_NE(a, nullptr) << file;
    ASSERT_NE(b, nullptr) << file;
    EXPECT_EQ(Comparable(a).DebugString(), Comparable(b).DebugString()) << file;
  }
}

}  // namespace
}  // namespace ampd::testing
