#ifndef AMPD_SERVER_AGENTS_GRPC_STORE_H_
#define AMPD_SERVER_AGENTS_GRPC_STORE_H_

// The rendezvous store of a rank on an agent's machine: the job's store on
// the server, reached through AgentService.StoreSet/StoreGet with the
// agent's credentials, so that no port or service beyond ampd's own is
// needed for ranks to meet.

#include <memory>
#include <string>

#include "ampd/v1/agent_service.grpc.pb.h"
#include "engine/dist/process_group.h"
#include "grpcpp/grpcpp.h"

namespace ampd::server::agents {

// How an agent (and its workers) reach the server: TLS when `ca` is set
// (PEM files), presenting a client certificate when `cert` and `key` are
// (mTLS), else plaintext.
struct AgentTls {
  std::string ca, cert, key;
};

// The agent's channel; null with *error set on a bad or missing file.
std::shared_ptr<grpc::Channel> AgentChannel(const std::string& server, const AgentTls& tls,
                                            std::string* error);

// Adds "authorization: Bearer TOKEN" when the token is not empty.
void Authorize(grpc::ClientContext* ctx, const std::string& token);

std::shared_ptr<engine::dist::RendezvousStore> GrpcStore(std::shared_ptr<grpc::Channel> channel,
                                                         std::string token, std::string job,
                                                         int64_t attempt);

}  // namespace ampd::server::agents

#endif  // AMPD_SERVER_AGENTS_GRPC_STORE_H_
