#ifndef AMPD_SERVER_TRAINING_SERVICE_H_
#define AMPD_SERVER_TRAINING_SERVICE_H_

#include <memory>

#include "ampd/v1/training_service.grpc.pb.h"
#include "server/auth.h"
#include "server/job_manager.h"

namespace ampd::server {

// ampd.v1.TrainingService on the gRPC callback API: no thread is held per
// open stream, so one server keeps thousands of StreamMetrics calls open.
// StreamMetrics is a raw method: it sends each event's bytes, serialized once
// for all its streams (JobManager::ReadWire), rather than serializing the
// message again for every subscriber.
class TrainingServiceImpl final
    : public ampd::v1::TrainingService::WithRawCallbackMethod_StreamMetrics<
          ampd::v1::TrainingService::CallbackService> {
 public:
  TrainingServiceImpl(JobManager* jobs, const Authenticator* auth,
                      int max_streams_per_principal = 1000, int max_generations = 2)
      : jobs_(jobs),
        auth_(auth),
        max_streams_per_principal_(max_streams_per_principal),
        max_generations_(max_generations) {}

  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                      const ampd::v1::CreateJobRequest* request,
                                      ampd::v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const ampd::v1::GetJobRequest* request,
                                   ampd::v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const ampd::v1::ListJobsRequest* request,
                                     ampd::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const ampd::v1::CancelJobRequest* request,
                                      ampd::v1::Job* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const ampd::v1::DeleteJobRequest* request,
                                      google::protobuf::Empty* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamMetrics(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) override;

  // Samples on a thread of its own per call (server/generation.h); at most
  // max_generations at once, server-wide.
  grpc::ServerWriteReactor<ampd::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const ampd::v1::GenerateRequest* request) override;

  // Open StreamMetrics calls, for limits and tests.
  static int open_streams();

 private:
  JobManager* jobs_;
  const Authenticator* auth_;
  int max_streams_per_principal_;
  int max_generations_;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_TRAINING_SERVICE_H_
