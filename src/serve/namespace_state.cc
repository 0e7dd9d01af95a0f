// Tenant generations of the node service: see namespace_state.h.
#include "serve/namespace_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string_view>
#include <utility>

#include "core/hex.h"
#include "core/unique_fd.h"
#include "env/dir_trust.h"

namespace kvtier::serve {
namespace {

constexpr std::string_view kHeader = "kvtier-serve-namespaces 1";
constexpr char kGenerationSeparator = '\x1f';

// The whole file, when it is a regular file of at most kStateFileBytesMax bytes; a link in its
// place is refused (O_NOFOLLOW), not followed.
Result<std::string> ReadStateFile(const std::string& path) {
  int raw = -1;
  do {
    raw = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0 && errno == ENOENT) return Status::NotFound(path + ": no such file");
  if (raw < 0 && errno == ELOOP) {
    return Status::InvalidArgument(path + " is a symbolic link: refusing to follow it");
  }
  if (raw < 0) return Status::FromErrno(errno, "open " + path);
  UniqueFd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + " is " + FileKindName(st.st_mode) +
                                   ", not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kStateFileBytesMax) {
    return Status::InvalidArgument(path + ": " + std::to_string(st.st_size) +
                                   " bytes, more than a state file's 16 MiB");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "read " + path);
    if (n == 0) break;  // Shrunk under us: parse what was there.
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

// Parses the state file's text into `out`; InvalidArgument naming the line that does not parse.
Status Parse(const std::string& path, std::string_view text,
             std::map<std::string, uint64_t>* out) {
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    if (eol == std::string_view::npos) {
      return Status::InvalidArgument(path + ": line " + std::to_string(line_no + 1) +
                                     " is not ended by a newline (a truncated file?)");
    }
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol + 1);
    ++line_no;
    const std::string where = path + ": line " + std::to_string(line_no);
    if (line_no == 1) {
      if (line != kHeader) {
        return Status::InvalidArgument(where + " is not \"" + std::string(kHeader) +
                                       "\": not a kvtier serve state file");
      }
      continue;
    }
    const size_t space = line.find(' ');
    uint64_t generation = 0;
    std::string scoped;
    const char* end = space == std::string_view::npos ? nullptr : line.data() + space;
    if (end == nullptr || std::from_chars(line.data(), end, generation).ptr != end ||
        generation == 0 || line.size() == space + 1 ||
        !BytesOfHex(line.substr(space + 1), &scoped)) {
      return Status::InvalidArgument(where + ": expected \"<generation> <hex tenant id>\"");
    }
    if (out->size() >= kClearedTenantsMax) {
      return Status::InvalidArgument(where + ": more than 65536 tenants");
    }
    (*out)[scoped] = generation;
  }
  if (line_no == 0) return Status::InvalidArgument(path + ": empty, not a state file");
  return Status::Ok();
}

}  // namespace

Status NamespaceGenerations::Open(const std::string& path) {
  std::map<std::string, uint64_t> loaded;
  if (!path.empty()) {
    Result<std::string> text = ReadStateFile(path);
    if (text.ok()) {
      KV_RETURN_IF_ERROR(Parse(path, *text, &loaded));
    } else if (text.status().code() != StatusCode::kNotFound) {
      return text.status().WithContext("the service's namespace state");
    }
  }
  MutexLock lock(&mu_);
  path_ = path;
  generations_ = std::move(loaded);
  return Status::Ok();
}

std::string NamespaceGenerations::SaltFor(const std::string& scoped) {
  MutexLock lock(&mu_);
  auto it = generations_.find(scoped);
  if (it == generations_.end()) return scoped;
  return scoped + kGenerationSeparator + "gen:" + std::to_string(it->second);
}

Result<uint64_t> NamespaceGenerations::Bump(const std::string& scoped) {
  MutexLock lock(&mu_);
  auto it = generations_.find(scoped);
  const bool existed = it != generations_.end();
  if (!existed && generations_.size() >= kClearedTenantsMax) {
    return Status::NoSpace("the service has cleared 65536 tenants already; its state file " +
                           path_ + " holds no more");
  }
  const uint64_t previous = existed ? it->second : 0;
  generations_[scoped] = previous + 1;
  if (!path_.empty()) {
    const Status s = ReplaceRegularFile("the service's namespace state", path_, Serialize(),
                                        0600, /*durable=*/true);
    if (!s.ok()) {
      if (existed) generations_[scoped] = previous;
      else generations_.erase(scoped);
      return s;
    }
  }
  return previous + 1;
}

std::string NamespaceGenerations::Serialize() const {
  std::string out(kHeader);
  out += '\n';
  for (const auto& [scoped, generation] : generations_) {
    out += std::to_string(generation) + ' ' + HexOf(scoped) + '\n';
  }
  return out;
}

}  // namespace kvtier::serve
