#include "client/watch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/time_util.h"

namespace ampd::client {

namespace v1 = ::ampd::v1;

std::string Sparkline(const std::vector<double>& values, size_t width) {
  static const char* kBars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  if (values.empty()) return "";
  const size_t start = values.size() > width ? values.size() - width : 0;
  double lo = values[start], hi = values[start];
  for (size_t i = start; i < values.size(); ++i) {
    lo = std::min(lo, values[i]);
    hi = std::max(hi, values[i]);
  }
  std::string out;
  for (size_t i = start; i < values.size(); ++i) {
    int level = hi > lo ? static_cast<int>((values[i] - lo) / (hi - lo) * 7.0 + 0.5) : 3;
    out += kBars[std::clamp(level, 0, 7)];
  }
  return out;
}

namespace {

// The whole history as `buckets` means: per-step losses are noisy, the trend
// is what a person watching wants to see.
std::vector<double> Trend(const std::vector<double>& values, size_t buckets) {
  if (values.size() <= buckets) return values;
  std::vector<double> out;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = values.size() * b / buckets, hi = values.size() * (b + 1) / buckets;
    double sum = 0;
    for (size_t i = lo; i < hi; ++i) sum += values[i];
    out.push_back(sum / std::max<size_t>(1, hi - lo));
  }
  return out;
}

// One line for an FP8 scaling record: how many tensors, the range of their
// scales (as powers of two, the form a scale takes when amax is a power of
// two), the largest amax and where, and what saturated since the last record.
std::string Fp8ScalingLine(const v1::Fp8ScalingRecord& r) {
  if (r.tensors().empty()) return absl::StrFormat("fp8   step %d: no FP8 tensors", r.step());
  double lo = INFINITY, hi = -INFINITY;
  const v1::Fp8ScalingRecord::Tensor* top = &r.tensors(0);
  const v1::Fp8ScalingRecord::Tensor* most_saturated = nullptr;
  int64_t saturated = 0;
  for (const auto& t : r.tensors()) {
    if (t.scale() > 0) {
      lo = std::min(lo, std::log2(t.scale()));
      hi = std::max(hi, std::log2(t.scale()));
    }
    if (t.amax() > top->amax()) top = &t;
    saturated += t.saturated();
    if (t.saturated() > 0 && (!most_saturated || t.saturated() > most_saturated->saturated())) {
      most_saturated = &t;
    }
  }
  std::string line = absl::StrFormat("fp8   step %d: %d tensors", r.step(), r.tensors_size());
  if (lo <= hi) absl::StrAppendFormat(&line, ", scales 2^%.1f..2^%.1f", lo, hi);
  absl::StrAppendFormat(&line, ", amax up to %.4g (%s %s), %d values saturated", top->amax(),
                        top->layer(), top->role(), saturated);
  if (most_saturated) {
    absl::StrAppendFormat(&line, " (most in %s %s: %d)", most_saturated->layer(),
                          most_saturated->role(), most_saturated->saturated());
  }
  return line;
}

class Display {
 public:
  Display(const Context& ctx, bool tty)
      : json_(ctx.options.output == OutputFormat::kJson), tty_(tty) {}

  void Event(const v1::MetricsEvent& e) {
    if (json_) {
      std::printf("%s\n", ToJson(e, false).c_str());
      std::fflush(stdout);
      return;
    }
    if (e.has_step_record()) {
      Step(e.step_record());
    } else if (e.has_eval()) {
      const auto& r = e.eval();
      if (IsLanguageModelEval(r)) {  // val loss (and bits per byte)
        last_val_loss_ = r.loss();
        char bpb[48] = "";
        if (r.bits_per_byte() > 0)
          std::snprintf(bpb, sizeof bpb, "  %.4f bits/byte", r.bits_per_byte());
        Line("eval  step %lld: val loss %.4f%s", (long long)r.step(), r.loss(), bpb);
      } else {
        last_accuracy_ = r.accuracy();
        Line("eval  step %lld: loss %.4f  accuracy %.2f%%", (long long)r.step(), r.loss(),
             100 * r.accuracy());
      }
    } else if (e.has_fp8_scaling()) {
      Line("%s", Fp8ScalingLine(e.fp8_scaling()).c_str());
    } else if (e.has_skip()) {
      const auto& s = e.skip();
      Line("skip  step %lld: %s in %s; loss scale %g -> %g", (long long)s.step(),
           s.reason().c_str(), s.parameter().empty() ? "?" : s.parameter().c_str(),
           s.scale_before(), s.scale_after());
    } else if (e.has_state()) {
      const auto& s = e.state();
      if (s.state() != last_state_) {
        last_state_ = s.state();
        if (s.reason().empty()) {
          Line("state %s", StateName(s.state()).c_str());
        } else {
          Line("state %s (%s)", StateName(s.state()).c_str(), s.reason().c_str());
        }
      }
    } else if (e.has_heartbeat() && tty_) {
      if (e.heartbeat().waiting_for().empty()) {
        Status("queued: %d job(s) ahead", e.heartbeat().queue_position());
      } else {
        Status("queued: %d job(s) ahead, waiting for %s", e.heartbeat().queue_position(),
               e.heartbeat().waiting_for().c_str());
      }
    }
  }

  void Note(const char* text) {
    if (json_) {
      std::fprintf(stderr, "%s\n", text);
      return;
    }
    Line("%s", text);
  }

  void Finish() {
    if (tty_ && status_shown_) {
      std::printf("\n");
      std::fflush(stdout);
    }
  }

  double last_accuracy() const { return last_accuracy_; }
  double last_val_loss() const { return last_val_loss_; }

 private:
  void Step(const v1::StepRecord& r) {
    const auto now = std::chrono::steady_clock::now();
    rates_.push_back({now, r.step()});
    while (rates_.size() > 50) rates_.pop_front();
    losses_.push_back(r.loss());
    double eta = -1;
    if (rates_.size() >= 2) {
      const double dt =
          std::chrono::duration<double>(rates_.back().first - rates_.front().first).count();
      const double ds = static_cast<double>(rates_.back().second - rates_.front().second);
      if (dt > 0 && ds > 0) eta = (r.total_steps() - r.step()) * dt / ds;
    }
    // A language model's rate is in tokens; MFU when the server knows the peak.
    char rate[64];
    if (r.tokens_per_s() > 0) {
      std::snprintf(rate, sizeof rate, "%.0f tokens/s", r.tokens_per_s());
    } else {
      std::snprintf(rate, sizeof rate, "%.0f samples/s", r.samples_per_s());
    }
    char mfu[160] = "";
    int used = 0;
    if (r.mfu() > 0) used = std::snprintf(mfu, sizeof mfu, "  MFU %.1f%%", 100 * r.mfu());
    if (r.workers() > 1) {
      // The workers' line: the all-reduce and how much the backward hid.
      std::string each;  // each worker's own rate, by rank
      for (double w : r.worker_samples_per_s()) {
        absl::StrAppend(&each, each.empty() ? "" : " ", absl::StrFormat("%.0f", w));
      }
      std::snprintf(mfu + used, sizeof mfu - used,
                    "  %d workers [%s samples/s], all-reduce %.1f ms (%.0f%% hidden)", r.workers(),
                    each.c_str(), 1e3 * r.allreduce_seconds(), 100 * r.allreduce_hidden());
    }
    if (!tty_) {
      Line("step  %lld/%lld  loss %.4f  lr %.3g  scale %g  skipped %lld  %s%s%s",
           (long long)r.step(), (long long)r.total_steps(), r.loss(), r.lr(), r.loss_scale(),
           (long long)r.skipped_total(), rate, mfu, r.skipped() ? "  (step skipped)" : "");
      return;
    }
    // Redraw at most ~20 times a second; always draw the last step.
    if (r.step() != r.total_steps() && now - last_draw_ < std::chrono::milliseconds(50)) return;
    last_draw_ = now;
    const int width = 24;
    const double frac = r.total_steps() > 0 ? static_cast<double>(r.step()) / r.total_steps() : 0;
    const int filled = static_cast<int>(frac * width);
    std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
    char acc[32] = "";
    if (last_accuracy_ >= 0) std::snprintf(acc, sizeof acc, "  acc %.2f%%", 100 * last_accuracy_);
    if (last_val_loss_ >= 0) std::snprintf(acc, sizeof acc, "  val %.4f", last_val_loss_);
    Status("%s %lld/%lld %3.0f%% ETA %s  loss %.4f %s%s  %s%s  scale %g  skipped %lld", bar.c_str(),
           (long long)r.step(), (long long)r.total_steps(), 100 * frac, FormatDuration(eta).c_str(),
           r.loss(), Sparkline(Trend(losses_, 16), 16).c_str(), acc, rate, mfu, r.loss_scale(),
           (long long)r.skipped_total());
  }

  template <typename... Args>
  void Line(const char* fmt, Args... args) {
    if (tty_ && status_shown_) std::printf("\r\x1b[2K");
    std::printf(fmt, args...);
    std::printf("\n");
    if (tty_ && status_shown_) std::printf("%s", status_.c_str());
    std::fflush(stdout);
  }

  template <typename... Args>
  void Status(const char* fmt, Args... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, args...);
    status_ = buf;
    status_shown_ = true;
    std::printf("\r\x1b[2K%s", buf);
    std::fflush(stdout);
  }

  bool json_;
  bool tty_;
  bool status_shown_ = false;
  std::string status_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> rates_;
  std::vector<double> losses_;
  double last_accuracy_ = -1;
  double last_val_loss_ = -1;
  v1::JobState last_state_ = v1::JOB_STATE_UNSPECIFIED;
  std::chrono::steady_clock::time_point last_draw_;
};

bool Transient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::INTERNAL ||
         code == grpc::StatusCode::UNKNOWN || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::CANCELLED;
}

// StreamMetrics from after `since_step`'s record, with the credentials.
std::unique_ptr<grpc::ClientReader<v1::MetricsEvent>> OpenStream(Context& ctx,
                                                                 grpc::ClientContext* call,
                                                                 const std::string& job_name,
                                                                 int64_t since_step,
                                                                 bool history_only) {
  ctx.Authorize(call);
  v1::StreamMetricsRequest request;
  request.set_name(job_name);
  request.set_since_step(since_step);
  request.set_history_only(history_only);
  return ctx.training->StreamMetrics(call, request);
}

}  // namespace

int WatchJob(Context& ctx, const std::string& job_name, const WatchOptions& options) {
  Display display(ctx, options.tty);
  int64_t last_step = 0;
  v1::JobState final_state = v1::JOB_STATE_UNSPECIFIED;
  std::string final_reason;
  auto last_contact = std::chrono::steady_clock::now();
  int backoff_ms = 100;
  bool announced_loss = false;
  while (true) {
    grpc::ClientContext call;
    auto reader = OpenStream(ctx, &call, job_name, last_step, /*history_only=*/false);
    v1::MetricsEvent event;
    bool got_any = false;
    while (reader->Read(&event)) {
      got_any = true;
      last_contact = std::chrono::steady_clock::now();
      backoff_ms = 100;
      if (announced_loss) {
        display.Note(("reconnected; resuming after step " + std::to_string(last_step)).c_str());
        announced_loss = false;
      }
      if (event.has_step_record()) last_step = event.step_record().step();
      display.Event(event);
      if (event.has_state() &&
          (event.state().state() == v1::SUCCEEDED || event.state().state() == v1::FAILED ||
           event.state().state() == v1::CANCELLED)) {
        final_state = event.state().state();
        final_reason = event.state().reason();
      }
    }
    grpc::Status status = reader->Finish();
    if (final_state != v1::JOB_STATE_UNSPECIFIED) break;
    if (status.ok()) {
      // The server ended the stream without a final state (it should not).
      display.Note("stream ended without a final state; reconnecting");
    } else if (!Transient(status.error_code())) {
      display.Finish();
      return ReportRpcError(ctx, "watch " + job_name, status);
    }
    if (got_any) last_contact = std::chrono::steady_clock::now();
    const double silent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_contact).count();
    if (silent > options.reconnect_timeout_s) {
      display.Finish();
      return ReportRpcError(ctx, "watch " + job_name, status);
    }
    if (!announced_loss) {
      char note[256];
      std::snprintf(note, sizeof note, "connection lost (%s); reconnecting from step %lld",
                    status.error_message().c_str(), (long long)last_step);
      display.Note(note);
      announced_loss = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 2000);
  }
  display.Finish();
  if (ctx.options.output != OutputFormat::kJson) {
    if (final_state == v1::SUCCEEDED) {
      if (display.last_val_loss() >= 0) {
        std::printf("job %s SUCCEEDED: final val loss %.4f\n", job_name.c_str(),
                    display.last_val_loss());
      } else if (display.last_accuracy() >= 0) {
        std::printf("job %s SUCCEEDED: final test accuracy %.2f%%\n", job_name.c_str(),
                    100 * display.last_accuracy());
      } else {
        std::printf("job %s SUCCEEDED\n", job_name.c_str());
      }
    } else {
      std::printf("job %s %s%s%s\n", job_name.c_str(), StateName(final_state).c_str(),
                  final_reason.empty() ? "" : ": ", final_reason.c_str());
    }
  }
  std::fflush(stdout);
  return final_state == v1::SUCCEEDED ? kExitOk
         : final_state == v1::FAILED  ? kExitJobFailed
                                      : kExitJobCancelled;
}

namespace {

const char* SeverityName(v1::LogRecord::Severity s) {
  switch (s) {
    case v1::LogRecord::SEVERITY_WARNING:
      return "WARNING";
    case v1::LogRecord::SEVERITY_ERROR:
      return "ERROR";
    default:
      return "INFO";
  }
}

// One log line for the events `ampctl logs` shows; "" for the others.
std::string LogLine(const v1::MetricsEvent& e) {
  char line[2048];
  if (e.has_log()) {
    std::snprintf(line, sizeof line, "%s %-7s step %-6lld %s",
                  google::protobuf::util::TimeUtil::ToString(e.log().time()).c_str(),
                  SeverityName(e.log().severity()), (long long)e.step(), e.log().message().c_str());
  } else if (e.has_state()) {
    std::snprintf(line, sizeof line, "%s %-7s step %-6lld state %s%s%s",
                  google::protobuf::util::TimeUtil::ToString(e.state().time()).c_str(),
                  e.state().state() == v1::FAILED ? "ERROR" : "INFO", (long long)e.step(),
                  StateName(e.state().state()).c_str(), e.state().reason().empty() ? "" : ": ",
                  e.state().reason().c_str());
  } else if (e.has_skip()) {
    std::snprintf(line, sizeof line,
                  "%-30s %-7s step %-6lld skipped: %s in %s; loss scale %g -> %g", "", "WARNING",
                  (long long)e.skip().step(), e.skip().reason().c_str(),
                  e.skip().parameter().c_str(), e.skip().scale_before(), e.skip().scale_after());
  } else {
    return "";
  }
  return line;
}

bool Terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

}  // namespace

int ShowLogs(Context& ctx, const std::string& job_name, bool follow, double reconnect_timeout_s) {
  int64_t last_step = 0;
  int64_t last_sequence = -1;  // the newest event already handled
  auto last_contact = std::chrono::steady_clock::now();
  int backoff_ms = 100;
  while (true) {
    grpc::ClientContext call;
    auto reader = OpenStream(ctx, &call, job_name, last_step, /*history_only=*/!follow);
    v1::MetricsEvent event;
    bool ended = false;
    while (reader->Read(&event)) {
      last_contact = std::chrono::steady_clock::now();
      backoff_ms = 100;
      if (event.has_heartbeat()) continue;
      if (event.sequence() <= last_sequence) continue;  // seen before a reconnect
      last_sequence = event.sequence();
      if (event.has_step_record()) last_step = event.step_record().step();
      if (event.has_state() && Terminal(event.state().state())) ended = true;
      if (ctx.options.output == OutputFormat::kJson) {
        if (!event.has_step_record() && !event.has_eval()) {
          std::printf("%s\n", ToJson(event, false).c_str());
        }
      } else if (const std::string line = LogLine(event); !line.empty()) {
        std::printf("%s\n", line.c_str());
      }
      std::fflush(stdout);
    }
    const grpc::Status status = reader->Finish();
    if (ended || (status.ok() && !follow)) return kExitOk;
    if (!status.ok() && !Transient(status.error_code())) {
      return ReportRpcError(ctx, "logs " + job_name, status);
    }
    const double silent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_contact).count();
    if (silent > reconnect_timeout_s) return ReportRpcError(ctx, "logs " + job_name, status);
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, 2000);
  }
}

}  // namespace ampd::client
