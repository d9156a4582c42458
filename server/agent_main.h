#ifndef AMPD_SERVER_AGENT_MAIN_H_
#define AMPD_SERVER_AGENT_MAIN_H_

// `ampd agent`: lends this machine's worker slots to an ampd server on
// another machine. It connects (AgentService.Connect) as an identity of role
// `agent`: a token in the server's --tokens_file, or under mTLS a client
// certificate (--tls_cert/--tls_key) that the server's --client_cert_roles
// names agent. Then for as long as the connection lasts runs the ranks of
// data-parallel jobs the server places here, each an `ampd worker` child
// process (worker_main.h) with its log under DATA_DIR/jobs/ID/workers/.
// Those ranks fetch the checkpoint they resume from and meet the job's other
// ranks through the server, and the agent fetches the files the job's spec
// names (into DATA_DIR/data/SHA256, once per content): nothing but the
// server's address is needed.
//
//   ampd agent --server=HOST:PORT [--slots=1] [--name=HOSTNAME]
//              [--data_dir=./ampd-agent-data] [--token=TOKEN | $AMPD_TOKEN]
//              [--tls_ca=PEM [--tls_cert=PEM --tls_key=PEM]]
//              [--worker_host=127.0.0.1]
//              [--fashion_mnist_dir=DIR] [--fortunes_dir=DIR]
//              [--reconnect_ms=2000] [--join=JOB]
//
// --join=JOB: started by a cluster's launcher for one job whose
// resources.externalWorkers is set: `srun -n 3 ampd agent --join=JOB ...`
// for a job of 4 workers. Each task reads its place from the launcher's
// environment (engine/dist/launcher_env.h): task t of T is the job's rank
// t + 1 of T + 1, with one slot for that job only; it exits 0 when the job
// has ended (and does not reconnect unless --reconnect_ms is given).
//
// --worker_host is the address this machine's ranks listen on for their
// peers (Gloo): one the other machines reach. When the connection ends the
// agent stops its ranks (their jobs restart from a checkpoint without them)
// and connects again after --reconnect_ms (0: exits instead). A refusal
// (UNAUTHENTICATED, PERMISSION_DENIED, a bad --slots or a name already
// connected) ends it with status 1 and the server's reason.

namespace ampd::server {

int AgentMain(int argc, char** argv);

}  // namespace ampd::server

#endif  // AMPD_SERVER_AGENT_MAIN_H_
