#ifndef AMPD_SERVER_PRECISION_SERVICE_H_
#define AMPD_SERVER_PRECISION_SERVICE_H_

#include <functional>
#include <utility>
#include <vector>

#include "ampd/v1/precision_service.grpc.pb.h"
#include "server/auth.h"
#include "server/profile_store.h"

namespace ampd::server {

class PrecisionServiceImpl final : public ampd::v1::PrecisionService::CallbackService {
 public:
  // `worker_slots`: the server's worker slots for GetCapabilities (null: none listed).
  PrecisionServiceImpl(ProfileStore* profiles, const Authenticator* auth,
                       std::function<std::vector<ampd::v1::WorkerSlots>()> worker_slots = nullptr)
      : profiles_(profiles), auth_(auth), worker_slots_(std::move(worker_slots)) {}

  grpc::ServerUnaryReactor* GetCapabilities(grpc::CallbackServerContext* ctx,
                                            const ampd::v1::GetCapabilitiesRequest* request,
                                            ampd::v1::Capabilities* response) override;
  grpc::ServerUnaryReactor* ExplainPrecision(grpc::CallbackServerContext* ctx,
                                             const ampd::v1::ExplainPrecisionRequest* request,
                                             ampd::v1::ExplainPrecisionResponse* response) override;
  grpc::ServerUnaryReactor* CreateProfile(grpc::CallbackServerContext* ctx,
                                          const ampd::v1::CreateProfileRequest* request,
                                          ampd::v1::PrecisionProfile* response) override;
  grpc::ServerUnaryReactor* GetProfile(grpc::CallbackServerContext* ctx,
                                       const ampd::v1::GetProfileRequest* request,
                                       ampd::v1::PrecisionProfile* response) override;
  grpc::ServerUnaryReactor* ListProfiles(grpc::CallbackServerContext* ctx,
                                         const ampd::v1::ListProfilesRequest* request,
                                         ampd::v1::ListProfilesResponse* response) override;
  grpc::ServerUnaryReactor* DeleteProfile(grpc::CallbackServerContext* ctx,
                                          const ampd::v1::DeleteProfileRequest* request,
                                          google::protobuf::Empty* response) override;

 private:
  ProfileStore* profiles_;
  const Authenticator* auth_;
  std::function<std::vector<ampd::v1::WorkerSlots>()> worker_slots_;
};

// The CPU's entry in GetCapabilities (also used by tests).
ampd::v1::DeviceInfo CpuDeviceInfo();

}  // namespace ampd::server

#endif  // AMPD_SERVER_PRECISION_SERVICE_H_
