#ifndef AMPD_SERVER_WORKER_MAIN_H_
#define AMPD_SERVER_WORKER_MAIN_H_

// `ampd worker ...`: one rank (1..N-1) of a data-parallel job that the server
// or an agent started as its child (jobs/local_workers.h, agent_main.h). It
// reads the job's spec as the server resolved it, loads the same data,
// resumes from the same checkpoint as rank 0, meets the other ranks through
// the job's rendezvous directory under the data root (over Gloo, or NCCL
// for a DEVICE_CUDA job: the server gives each such rank its own device as
// CUDA_VISIBLE_DEVICES), trains its share of every global batch, and leaves
// through a barrier. It writes nothing of the job's: rank 0 (in the server)
// keeps the history, checkpoints and weights. It dies with the server
// (PR_SET_PDEATHSIG), so a killed server leaves no orphans behind.
//
//   ampd worker --spec=FILE --job=ID --rank=R --world_size=N --rendezvous=DIR
//               --data_root=DIR --fashion_mnist_dir=DIR [--fortunes_dir=DIR]
//               [--owner=NAME] [--hostname=ADDR]
//               [--resume_step=S] [--parent_pid=PID] [--timeout_ms=MS]
//
// On an agent's machine the rendezvous is the server's store instead of a
// directory: --store_server=HOST:PORT --attempt=A [--tls_ca=PEM
// [--tls_cert=PEM --tls_key=PEM]] replace --rendezvous, with the agent's
// token (if any) in $AMPD_TOKEN. --hostname is the
// address this rank listens on for its peers (default 127.0.0.1).
// --data_files=FILE (lines "PATH<TAB>LOCAL FILE", written by the agent)
// names the local copies of the files the spec names, fetched from the
// server: the spec's paths resolve through it first.
//
// Exit status: 0 trained to the end, 1 failed (the reason on stderr), 2 bad
// arguments.

namespace ampd::server {

int WorkerMain(int argc, char** argv);

}  // namespace ampd::server

#endif  // AMPD_SERVER_WORKER_MAIN_H_
