// One line of progress, with rate and ETA, for CLI commands that can run longer than a few
// seconds (preload, demo, bench decode, bench ssd, ...). On a terminal the line is redrawn in
// place ("\r", at most 10 times a second) and ended with a newline by Finish(); otherwise (a pipe,
// a log file, CI) a plain line is printed at most every 5 seconds, so logs stay short. Progress
// goes to stderr, never stdout, so `--json` output stays machine-readable. Nothing is printed
// when the CLI runs with --quiet or --log-level error.
//
// Thread safety: one thread updates a Progress; Update() is cheap when nothing is due (a clock
// read), so it can be called per item.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace kvtier::cli {

enum class ProgressUnit {
  kCount,  // items: "1200/4096 tokens, 310 tokens/s"
  kBytes,  // bytes: "1.2 GiB/4.0 GiB, 820 MiB/s"
};

class Progress {
 public:
  // `label` starts the line ("preload"); `total` is 0 when unknown (no percentage, no ETA);
  // `noun` names the items for kCount ("tokens", "chunks"). `out` defaults to stderr; tests pass
  // a file, and `force_terminal` chooses the terminal format regardless of isatty(out).
  Progress(std::string label, uint64_t total, ProgressUnit unit, std::string noun = "",
           std::FILE* out = nullptr, int force_terminal = -1);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Records that `done` of `total` are complete, and prints when a line is due.
  void Update(uint64_t done);
  // Adds to the count of completed items.
  void Add(uint64_t n) { Update(done_ + n); }
  // Changes the total (known only after a first pass, say).
  void SetTotal(uint64_t total) { total_ = total; }
  // Changes the label (the phase a multi-phase command is in); counts and rate go on.
  void SetLabel(std::string label) { label_ = std::move(label); }
  // Prints the final line (done, elapsed, mean rate) and ends the terminal line. Idempotent; the
  // destructor calls it so an early return still ends the line.
  void Finish();

  // The line Update() would print now, without "\r" or "\n" (for tests).
  std::string Line() const;

  // "1.5 GiB", "820 MiB", "12 KiB", "512 B".
  static std::string FormatBytes(double bytes);
  // "1h02m", "3m05s", "42s".
  static std::string FormatDuration(double seconds);

 private:
  using Clock = std::chrono::steady_clock;
  void Print(bool final_line);

  std::string label_;
  uint64_t total_;
  ProgressUnit unit_;
  std::string noun_;
  std::FILE* out_;
  bool terminal_;
  bool enabled_;
  bool finished_ = false;
  uint64_t done_ = 0;
  Clock::time_point start_;
  Clock::time_point last_print_;
  size_t last_width_ = 0;  // Of the last terminal line, to blank a longer one.
};

}  // namespace kvtier::cli
