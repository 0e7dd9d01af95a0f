// Progress: see progress.h.
#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>

#include "log_level.h"

namespace kvtier::cli {

namespace {
constexpr double kTerminalIntervalSeconds = 0.1;
constexpr double kPlainIntervalSeconds = 5.0;
}  // namespace

Progress::Progress(std::string label, uint64_t total, ProgressUnit unit, std::string noun,
                   std::FILE* out, int force_terminal)
    : label_(std::move(label)),
      total_(total),
      unit_(unit),
      noun_(std::move(noun)),
      out_(out != nullptr ? out : stderr),
      terminal_(force_terminal >= 0 ? force_terminal != 0 : ::isatty(fileno(out_)) == 1),
      enabled_(out != nullptr || CliLogLevel() < LogLevel::kError),
      start_(Clock::now()),
      last_print_(start_) {}

Progress::~Progress() { Finish(); }

std::string Progress::FormatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[u]);
  return buf;
}

std::string Progress::FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const uint64_t s = static_cast<uint64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 "h%02" PRIu64 "m", s / 3600, (s / 60) % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 "s", s);
  }
  return buf;
}

std::string Progress::Line() const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  auto amount = [&](double v) {
    if (unit_ == ProgressUnit::kBytes) return FormatBytes(v);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return std::string(buf);
  };
  std::string line = label_ + ": " + amount(static_cast<double>(done_));
  if (total_ > 0) line += "/" + amount(static_cast<double>(total_));
  if (unit_ == ProgressUnit::kCount && !noun_.empty()) line += " " + noun_;
  if (total_ > 0) {
    char pct[16];
    std::snprintf(pct, sizeof(pct), " (%.0f%%)",
                  100.0 * std::min<double>(1.0, static_cast<double>(done_) / static_cast<double>(total_)));
    line += pct;
  }
  if (elapsed > 0 && done_ > 0) {
    if (unit_ == ProgressUnit::kBytes) {
      line += ", " + FormatBytes(rate) + "/s";
    } else {
      char r[48];
      std::snprintf(r, sizeof(r), ", %.*f %s/s", rate < 10 ? 1 : 0, rate,
                    noun_.empty() ? "items" : noun_.c_str());
      line += r;
    }
  }
  if (finished_) {
    line += ", " + FormatDuration(elapsed);
  } else if (total_ > 0 && done_ > 0 && done_ < total_ && rate > 0) {
    line += ", ETA " + FormatDuration(static_cast<double>(total_ - done_) / rate);
  }
  return line;
}

void Progress::Update(uint64_t done) {
  done_ = done;
  if (!enabled_ || finished_) return;
  const Clock::time_point now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (since < (terminal_ ? kTerminalIntervalSeconds : kPlainIntervalSeconds)) return;
  last_print_ = now;
  Print(/*final_line=*/false);
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  // A plain log gets a final line only when the command took long enough to print any.
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  if (!terminal_ && last_print_ == start_ && elapsed < kPlainIntervalSeconds) return;
  Print(/*final_line=*/true);
}

void Progress::Print(bool final_line) {
  const std::string line = Line();
  if (terminal_) {
    // Blank what is left of a longer previous line.
    const size_t pad = last_width_ > line.size() ? last_width_ - line.size() : 0;
    std::fprintf(out_, "\r%s%*s%s", line.c_str(), static_cast<int>(pad), "",
                 final_line ? "\n" : "");
    last_width_ = line.size();
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace kvtier::cli
