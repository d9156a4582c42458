#ifndef AMPD_SERVER_AGENTS_AGENT_SERVICE_H_
#define AMPD_SERVER_AGENTS_AGENT_SERVICE_H_

// AgentService (proto/ampd/v1/agent_service.proto): agents' sessions, their
// reports, the rendezvous store of the jobs their ranks belong to, the
// checkpoints those ranks resume from and the files their specs name. A job's store is the
// directory its local ranks use (jobs/ID/workers/rendezvous, Gloo's file store), so every rank of a
// job meets in one place wherever it runs.

#include <memory>
#include <string>

#include "ampd/v1/agent_service.grpc.pb.h"
#include "engine/dist/process_group.h"
#include "server/agents/agent_registry.h"
#include "server/auth.h"

namespace ampd::server::agents {

class AgentServiceImpl final : public ampd::v1::AgentService::Service {
 public:
  AgentServiceImpl(AgentRegistry* registry, std::string data_root, const Authenticator* auth)
      : registry_(registry), data_root_(std::move(data_root)), auth_(auth) {}

  grpc::Status Connect(grpc::ServerContext* ctx, const ampd::v1::AgentHello* hello,
                       grpc::ServerWriter<ampd::v1::AgentWork>* writer) override;
  grpc::Status ReportWorker(grpc::ServerContext* ctx, const ampd::v1::WorkerReport* report,
                            google::protobuf::Empty* response) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const ampd::v1::StoreSetRequest* request,
                        google::protobuf::Empty* response) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const ampd::v1::StoreGetRequest* request,
                        ampd::v1::StoreGetResponse* response) override;
  grpc::Status FetchCheckpoint(grpc::ServerContext* ctx,
                               const ampd::v1::FetchCheckpointRequest* request,
                               grpc::ServerWriter<ampd::v1::CheckpointChunk>* writer) override;
  grpc::Status FetchDataFile(grpc::ServerContext* ctx,
                             const ampd::v1::FetchDataFileRequest* request,
                             grpc::ServerWriter<ampd::v1::DataFileChunk>* writer) override;

 private:
  // The caller may use this job attempt's store (its agent runs ranks of
  // it); *caller (if given) gets who it is.
  grpc::Status CheckRuns(const grpc::ServerContext* ctx, const std::string& job, int64_t attempt,
                         const std::string& key, Principal* caller = nullptr) const;

  absl::StatusOr<std::shared_ptr<engine::dist::RendezvousStore>> JobStore(
      const std::string& job) const;

  AgentRegistry* registry_;
  std::string data_root_;
  const Authenticator* auth_;
};

}  // namespace ampd::server::agents

#endif  // AMPD_SERVER_AGENTS_AGENT_SERVICE_H_
