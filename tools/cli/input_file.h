// Reading the files a user names on the command line (prompts, traces, token lists) and checking
// the config file before CLI11 reads it. Two rules hold for all of them: only a regular file is
// read by name ("-" stands for stdin where the command takes it), and no more than a fixed number
// of bytes is read (cli_limits.h). A FIFO, a device such as /dev/zero or a directory is refused
// before any byte is read (opened with O_NONBLOCK, so a FIFO without a writer cannot hang the
// open), and a file or stream longer than its limit ends with a message naming both. Symbolic
// links are followed: these are the user's own inputs, not files in a cache directory.
//
// Thread safety: reentrant functions. Ownership: the text read is the caller's.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier::cli {

// "64 MiB", "1 GiB", "4096 B": the largest binary unit that divides `bytes`.
std::string SizeText(uint64_t bytes);

// Reads all of `path` ("-": stdin) into *out. `name` stands for the input in messages
// ("--prompt-file notes.txt"). InvalidArgument when `path` is not a regular file or holds more
// than `bytes_max` bytes (stdin: sends more); the errno error of open or read otherwise.
Status ReadInputFile(const std::string& path, const std::string& name, uint64_t bytes_max,
                     std::string* out);

// OK when `path` names a regular file (after links) of at most `bytes_max` bytes; else
// InvalidArgument (not a regular file, too large) or the errno error of stat, naming `name`.
Status CheckInputFile(const std::string& path, const std::string& name, uint64_t bytes_max);

}  // namespace kvtier::cli
