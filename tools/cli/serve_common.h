// What `kvtier serve` and `kvtier ctl` share: where the service's socket is by default, the
// flags that name it (--socket, --token-file), and reading the secret files the service and its
// clients are given (the client token, the tenant secret).
//
// The default socket is $XDG_RUNTIME_DIR/kvtier/kvtier.sock (a per-user directory that systemd
// and login sessions create 0700), or /run/kvtier/kvtier.sock when running as root (the
// systemd unit's RuntimeDirectory). Both commands compute it the same way, so `kvtier ctl stats`
// finds a `kvtier serve` started by the same user without flags.
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

struct SocketFlags {
  std::string socket;      // Empty: DefaultSocketPath().
  std::string token_file;  // Empty: no token.
};

// --socket PATH (KVTIER_SOCKET) and --token-file PATH (KVTIER_TOKEN_FILE) on `c`.
void AddSocketFlags(CLI::App* c, SocketFlags* flags, const std::string& token_help);

// $XDG_RUNTIME_DIR/kvtier/kvtier.sock, or /run/kvtier/kvtier.sock for root. InvalidArgument
// (saying to give --socket) when neither applies.
Result<std::string> DefaultSocketPath();

// flags.socket, or the default.
Result<std::string> SocketPath(const SocketFlags& flags);

// The secret in `path`: a regular file of at most kSecretFileBytesMax bytes that neither its
// group nor others may read or write (mode 0600 or stricter), its text without leading and
// trailing whitespace, not empty. InvalidArgument naming `flag` and the problem (chmod 600 it).
Result<std::string> ReadSecretFile(const std::string& path, const std::string& flag);

// A group name or number: its gid. InvalidArgument naming `flag` when there is no such group.
Result<uint32_t> ResolveGroup(const std::string& name, const std::string& flag);

}  // namespace kvtier::cli
