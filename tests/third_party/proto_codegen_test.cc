// Proves the proto macro end to end: generated messages, gRPC stubs that link
// against Debian's gRPC, and a descriptor set that describes the service.
#include <fstream>
#include <memory>
#include <string>

#include "echo.grpc.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace ampd::buildtest {
namespace {

class EchoImpl final : public Echo::Service {
  grpc::Status Say(grpc::ServerContext*, const EchoRequest* req, EchoReply* reply) override {
    if (req->repeat() < 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "repeat: must be >= 0");
    }
    std::string out;
    for (int i = 0; i < req->repeat(); ++i) out += req->text();
    reply->set_text(out);
    return grpc::Status::OK;
  }
  grpc::Status SayStream(grpc::ServerContext*, const EchoRequest* req,
                         grpc::ServerWriter<EchoReply>* writer) override {
    for (int i = 0; i < req->repeat(); ++i) {
      EchoReply reply;
      reply.set_text(req->text() + std::to_string(i));
      writer->Write(reply);
    }
    return grpc::Status::OK;
  }
};

TEST(ProtoCodegenTest, UnaryAndStreamingOverInProcessChannel) {
  EchoImpl service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = Echo::NewStub(server->InProcessChannel(grpc::ChannelArguments()));

  grpc::ClientContext ctx;
  EchoRequest req;
  req.set_text("ab");
  req.set_repeat(3);
  EchoReply reply;
  ASSERT_TRUE(stub->Say(&ctx, req, &reply).ok());
  EXPECT_EQ(reply.text(), "ababab");

  grpc::ClientContext bad_ctx;
  req.set_repeat(-1);
  grpc::Status bad = stub->Say(&bad_ctx, req, &reply);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext stream_ctx;
  req.set_repeat(4);
  auto reader = stub->SayStream(&stream_ctx, req);
  int n = 0;
  while (reader->Read(&reply)) {
    EXPECT_EQ(reply.text(), "ab" + std::to_string(n));
    ++n;
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(n, 4);
  server->Shutdown();
}

TEST(ProtoCodegenTest, DescriptorSetDescribesTheService) {
  std::ifstream in("tests/third_party/echo_proto_descriptor_set.pb", std::ios::binary);
  ASSERT_TRUE(in.good());
  google::protobuf::FileDescriptorSet set;
  ASSERT_TRUE(set.ParseFromIstream(&in));
  google::protobuf::DescriptorPool pool;
  for (const auto& file : set.file()) ASSERT_NE(pool.BuildFile(file), nullptr) << file.name();
  const auto* service = pool.FindServiceByName("ampd.buildtest.Echo");
  ASSERT_NE(service, nullptr);
  const auto* method = service->FindMethodByName("SayStream");
  ASSERT_NE(method, nullptr);
  EXPECT_TRUE(method->server_streaming());
  EXPECT_EQ(method->input_type()->full_name(), "ampd.buildtest.EchoRequest");
}

}  // namespace
}  // namespace ampd::buildtest
