// See serve_common.h.
#include "serve_common.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/unique_fd.h"

namespace kvtier::cli {

void AddSocketFlags(CLI::App* c, SocketFlags* f, const std::string& token_help) {
  c->add_option("--socket", f->socket,
                "The service's Unix socket (default: $XDG_RUNTIME_DIR/kvtier/kvtier.sock, or "
                "/run/kvtier/kvtier.sock as root or under systemd)")
      ->envname("KVTIER_SOCKET");
  c->add_option("--token-file", f->token_file, token_help)->envname("KVTIER_TOKEN_FILE");
}

namespace {

constexpr const char* kSystemSocket = "/run/kvtier/kvtier.sock";

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

Result<std::string> DefaultSocketPath(SocketRole role) {
  const char* systemd = std::getenv("RUNTIME_DIRECTORY");  // "/run/kvtier[:/run/other...]".
  if (role == SocketRole::kService && systemd != nullptr && systemd[0] == '/') {
    const std::string dirs(systemd);
    return dirs.substr(0, dirs.find(':')) + "/kvtier.sock";
  }
  if (::geteuid() == 0) return std::string(kSystemSocket);
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const bool have_user_dir = runtime != nullptr && runtime[0] == '/';
  const std::string user_socket = have_user_dir ? std::string(runtime) + "/kvtier/kvtier.sock" : "";
  if (role == SocketRole::kClient && (!have_user_dir || !Exists(user_socket)) &&
      Exists(kSystemSocket)) {
    return std::string(kSystemSocket);
  }
  if (!have_user_dir) {
    return Status::InvalidArgument(
        "no default socket: XDG_RUNTIME_DIR is not set (no login session)" +
        std::string(role == SocketRole::kClient ? " and there is no " + std::string(kSystemSocket)
                                                : "") +
        "; give --socket PATH (or KVTIER_SOCKET)");
  }
  return user_socket;
}

Result<std::string> SocketPath(const SocketFlags& flags, SocketRole role) {
  if (!flags.socket.empty()) return flags.socket;
  return DefaultSocketPath(role);
}

Result<std::string> ReadSecretFile(const std::string& path, const std::string& flag) {
  const std::string what = flag + " " + path;
  // O_NONBLOCK: a FIFO without a writer cannot hang the open.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return Status::FromErrno(errno, what);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, what);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(what + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument(what + " has mode " + mode +
                                   ": other users may read or change it; chmod 600 it");
  }
  if (static_cast<uint64_t>(st.st_size) > kSecretFileBytesMax) {
    return Status::InvalidArgument(what + " is larger than " +
                                   std::to_string(kSecretFileBytesMax) + " bytes");
  }
  std::string text(kSecretFileBytesMax + 1, '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, what);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done > kSecretFileBytesMax) {
    return Status::InvalidArgument(what + " is larger than " +
                                   std::to_string(kSecretFileBytesMax) + " bytes");
  }
  text.resize(done);
  const size_t a = text.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return Status::InvalidArgument(what + " is empty");
  const size_t b = text.find_last_not_of(" \t\r\n");
  return text.substr(a, b - a + 1);
}

Status ExplainConnectFailure(const Status& status, const std::string& token_flag) {
  const std::string& why = status.message();
  if (why.find("refused this client") != std::string::npos) {
    return Status(status.code(), why + "; give its " + token_flag +
                                     ", or have your uid or group admitted (--allow-uid, "
                                     "--allow-group, --socket-group)");
  }
  return Status(status.code(), why + "; is kvtier serve running there? (--socket or "
                                     "KVTIER_SOCKET names another)");
}

Result<uint32_t> ResolveGroup(const std::string& name, const std::string& flag) {
  uint32_t gid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), gid);
  if (!name.empty() && ec == std::errc() && end == name.data() + name.size()) return gid;
  group g{};
  group* found = nullptr;
  std::vector<char> buffer(16384);
  const int rc = ::getgrnam_r(name.c_str(), &g, buffer.data(), buffer.size(), &found);
  if (rc != 0) return Status::FromErrno(rc, flag + " " + name);
  if (found == nullptr) {
    return Status::InvalidArgument(flag + " " + name + ": no such group (getent group " + name +
                                   " finds none)");
  }
  return static_cast<uint32_t>(found->gr_gid);
}

}  // namespace kvtier::cli
