#ifndef AMPD_CLIENT_WATCH_H_
#define AMPD_CLIENT_WATCH_H_

#include <string>

#include "client/cli.h"

namespace ampd::client {

struct WatchOptions {
  bool tty = false;                 // redraw a progress line; otherwise one line per update
  double reconnect_timeout_s = 60;  // give up after this long without a connection
};

// Follows a job's metrics until it ends, reconnecting with since_step after a
// dropped connection (no gap, no repeat). Returns the exit code for the job's
// final state (kExitOk on SUCCEEDED).
int WatchJob(Context& ctx, const std::string& job_name, const WatchOptions& options);

// The job's own log (LogRecord events: where it trains, checkpoints,
// restarts, device memory, warnings) with its state changes and skipped
// steps, one line each. Without `follow`, what the job has logged so far;
// with it, until the job ends. Reconnects like WatchJob, printing no line
// twice (events carry their sequence). Returns kExitOk or an RPC error's code.
int ShowLogs(Context& ctx, const std::string& job_name, bool follow, double reconnect_timeout_s);

// Renders a loss history as a sparkline (▁▂▃▄▅▆▇█), newest last.
std::string Sparkline(const std::vector<double>& values, size_t width);

}  // namespace ampd::client

#endif  // AMPD_CLIENT_WATCH_H_
