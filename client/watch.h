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

// Renders a loss history as a sparkline (▁▂▃▄▅▆▇█), newest last.
std::string Sparkline(const std::vector<double>& values, size_t width);

}  // namespace ampd::client

#endif  // AMPD_CLIENT_WATCH_H_
