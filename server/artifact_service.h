#ifndef AMPD_SERVER_ARTIFACT_SERVICE_H_
#define AMPD_SERVER_ARTIFACT_SERVICE_H_

#include <string>

#include "ampd/v1/artifact_service.grpc.pb.h"
#include "server/auth.h"
#include "server/job_manager.h"

namespace ampd::server {

// Files are streamed with the synchronous API: a transfer holds a thread of
// gRPC's pool for its duration, which suits a few large transfers.
class ArtifactServiceImpl final : public ampd::v1::ArtifactService::Service {
 public:
  ArtifactServiceImpl(JobManager* jobs, std::string data_root, int64_t max_upload_bytes,
                      const Authenticator* auth, int64_t upload_quota_bytes = 10LL << 30)
      : jobs_(jobs),
        data_root_(std::move(data_root)),
        max_upload_bytes_(max_upload_bytes),
        upload_quota_bytes_(upload_quota_bytes),
        auth_(auth) {}

  grpc::Status ListArtifacts(grpc::ServerContext* ctx,
                             const ampd::v1::ListArtifactsRequest* request,
                             ampd::v1::ListArtifactsResponse* response) override;
  grpc::Status DownloadArtifact(grpc::ServerContext* ctx,
                                const ampd::v1::DownloadArtifactRequest* request,
                                grpc::ServerWriter<ampd::v1::ArtifactChunk>* writer) override;
  grpc::Status UploadDataset(grpc::ServerContext* ctx,
                             grpc::ServerReader<ampd::v1::UploadDatasetRequest>* reader,
                             ampd::v1::UploadedDataset* response) override;

 private:
  JobManager* jobs_;
  std::string data_root_;
  int64_t max_upload_bytes_;
  int64_t upload_quota_bytes_;
  const Authenticator* auth_;
};

}  // namespace ampd::server

#endif  // AMPD_SERVER_ARTIFACT_SERVICE_H_
