// What `kvtier serve` and `kvtier ctl` share: where the service's socket is by default, the
// flags that name it (--socket, --token-file), and reading the secret files the service and its
// clients are given (the client token, the tenant secret).
//
// The default socket: the service puts it in $RUNTIME_DIRECTORY (the directory systemd makes for
// the unit's RuntimeDirectory=kvtier, /run/kvtier), else /run/kvtier as root, else
// $XDG_RUNTIME_DIR/kvtier (the per-user directory of a login session). A client (kvtier ctl)
// takes the first of $XDG_RUNTIME_DIR/kvtier/kvtier.sock and /run/kvtier/kvtier.sock that exists
// (root: /run/kvtier), so `kvtier ctl stats` finds the same user's service and the system one
// without flags.
//
// Thread safety: functions of their arguments and the environment (read only).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "kvtier/result.h"
#include "kvtier/status.h"

namespace kvtier::cli {

// Secrets are short: a token or a tenant secret of a few dozen bytes.
inline constexpr uint64_t kSecretFileBytesMax = 4096;
inline constexpr uint32_t kUidMax = 4294967294u;  // (uid_t)-1 means "no change" to the kernel.

struct SocketFlags {
  std::string socket;      // Empty: DefaultSocketPath().
  std::string token_file;  // Empty: no token.
};

// --socket PATH (KVTIER_SOCKET) and --token-file PATH (KVTIER_TOKEN_FILE) on `c`.
void AddSocketFlags(CLI::App* c, SocketFlags* flags, const std::string& token_help);

enum class SocketRole : uint8_t { kService = 0, kClient = 1 };

// The default socket of the service or of a client, as above. InvalidArgument (saying to give
// --socket) when there is none.
Result<std::string> DefaultSocketPath(SocketRole role);

// flags.socket, or the default.
Result<std::string> SocketPath(const SocketFlags& flags, SocketRole role);

// The secret in `path`: a regular file of at most kSecretFileBytesMax bytes that neither its
// group nor others may read or write (mode 0600 or stricter), its text without leading and
// trailing whitespace, not empty. InvalidArgument naming `flag` and the problem (chmod 600 it).
Result<std::string> ReadSecretFile(const std::string& path, const std::string& flag);

// A failed serve::Connect's status with what to do about it: when the service refused the client,
// give `token_flag` or have the uid or group admitted; otherwise check that the service runs.
Status ExplainConnectFailure(const Status& status, const std::string& token_flag);

// A group name or number: its gid. InvalidArgument naming `flag` when there is no such group.
Result<uint32_t> ResolveGroup(const std::string& name, const std::string& flag);

}  // namespace kvtier::cli
