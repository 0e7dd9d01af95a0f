// Bounds on what the CLI reads from files and streams the user names: prompts, traces, token
// lists and the config file. Each is generous for its use but finite, so that a device node
// (/dev/zero), an endless pipe or a hostile file ends with a message naming the file and the
// limit instead of exhausting memory (docs/security.md, "Files the CLI reads").
//
// Thread safety: constants only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/limits.h"

namespace kvtier::cli {

// --prompt-file, --prompt - (stdin) and preload --document: one prompt's text.
inline constexpr uint64_t kPromptFileBytesMax = 64 * kMiB;
// preload --trace: every prompt of a trace, one per line.
inline constexpr uint64_t kTraceFileBytesMax = 256 * kMiB;
// chat: one user turn, a line of stdin.
inline constexpr size_t kChatTurnBytesMax = 64 * kKiB;
// hash --tokens: whitespace-separated decimal token ids.
inline constexpr uint64_t kTokenFileBytesMax = 64 * kMiB;
// --config / KVTIER_CONFIG: a TOML file of options (a full one is a few KiB). CLI11's reader keeps
// a list of parents per key and per table change, so the size and the nesting bound its memory.
inline constexpr uint64_t kConfigFileBytesMax = 64 * kKiB;
// Tables nested in the config file ([bench.ssd] is 2): deeper than any subcommand path.
inline constexpr size_t kConfigDepthMax = 4;

// A token file of kTokensPerCallMax ids of 10 digits, each with a CRLF, fits.
static_assert(kTokensPerCallMax * 12 <= kTokenFileBytesMax);
static_assert(kPromptFileBytesMax <= kTraceFileBytesMax);

}  // namespace kvtier::cli
