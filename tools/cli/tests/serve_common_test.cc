// Tests of what `kvtier serve` and `kvtier ctl` share (serve_common.h): the default socket for
// the service and for a client (under systemd's RUNTIME_DIRECTORY, in a login session's
// XDG_RUNTIME_DIR, without either), and reading secret files (trimmed; refused when other users
// may read them, when empty, too large or not a regular file). The environment variables are set
// and restored by each test; files live in a fresh temporary directory.
#include "serve_common.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace kvtier::cli {
namespace {

// Sets (or unsets, with nullopt) a variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value.has_value()) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class ServeCommonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kvtier-serve-common-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }

  std::string dir_;
};

TEST_F(ServeCommonTest, ServiceSocketIsInSystemdsRuntimeDirectory) {
  ScopedEnv runtime("RUNTIME_DIRECTORY", dir_ + ":/run/other");
  Result<std::string> s = DefaultSocketPath(SocketRole::kService);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, dir_ + "/kvtier.sock");
}

TEST_F(ServeCommonTest, WithoutSystemdTheSocketIsTheUsersOrRoots) {
  ScopedEnv runtime("RUNTIME_DIRECTORY", std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", dir_);
  Result<std::string> s = DefaultSocketPath(SocketRole::kService);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, ::geteuid() == 0 ? "/run/kvtier/kvtier.sock" : dir_ + "/kvtier/kvtier.sock");
  // The client ignores RUNTIME_DIRECTORY (it is the service's).
  ScopedEnv systemd("RUNTIME_DIRECTORY", "/elsewhere");
  Result<std::string> c = DefaultSocketPath(SocketRole::kClient);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, "/elsewhere/kvtier.sock");
}

TEST_F(ServeCommonTest, WithoutALoginSessionOnlyRootHasADefault) {
  ScopedEnv runtime("RUNTIME_DIRECTORY", std::nullopt);
  ScopedEnv xdg("XDG_RUNTIME_DIR", std::nullopt);
  Result<std::string> s = DefaultSocketPath(SocketRole::kService);
  if (::geteuid() == 0) {
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*s, "/run/kvtier/kvtier.sock");
    return;
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--socket"), std::string::npos);
}

TEST_F(ServeCommonTest, TheFlagWinsOverTheDefault) {
  Result<std::string> s = SocketPath({.socket = "/tmp/x.sock"}, SocketRole::kClient);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "/tmp/x.sock");
}

TEST_F(ServeCommonTest, SecretIsTrimmed) {
  Result<std::string> s = ReadSecretFile(Write("s", "  secret text \n\n", 0600), "--token-file");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s, "secret text");
}

TEST_F(ServeCommonTest, SecretOthersMayReadIsRefused) {
  for (mode_t mode : {0644u, 0640u, 0606u, 0620u}) {
    Result<std::string> s = ReadSecretFile(Write("s", "secret", mode), "--token-file");
    ASSERT_FALSE(s.ok()) << std::oct << mode;
    EXPECT_TRUE(s.status().IsInvalidArgument());
    EXPECT_NE(s.status().message().find("chmod 600"), std::string::npos) << s.status().ToString();
  }
}

TEST_F(ServeCommonTest, EmptyLargeMissingOrSpecialSecretsAreRefused) {
  EXPECT_TRUE(ReadSecretFile(Write("e", " \n", 0600), "--token-file").status().IsInvalidArgument());
  const std::string big(kSecretFileBytesMax + 1, 'x');
  Result<std::string> s = ReadSecretFile(Write("b", big, 0600), "--token-file");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("larger than"), std::string::npos);
  EXPECT_FALSE(ReadSecretFile(dir_ + "/missing", "--token-file").ok());
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  s = ReadSecretFile(fifo, "--token-file");  // O_NONBLOCK: no hang without a writer.
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not a regular file"), std::string::npos);
}

TEST_F(ServeCommonTest, GroupsByNumberOrName) {
  Result<uint32_t> g = ResolveGroup("12345", "--allow-group");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, 12345u);
  g = ResolveGroup("root", "--allow-group");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*g, 0u);
  g = ResolveGroup("no-such-group-kvtier", "--allow-group");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("no such group"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::cli
