// Goal: the pieces behind the CLI's strict configuration (config_check.h) and bounded input
// files (input_file.h): edit distance and the nearest name; the nesting bound on a config file's
// text (headers, dotted keys, CRLF lines); every config item checked against a command tree, with
// the nearest key or table, in the file's spelling, or where a misplaced key belongs; KVTIER_*
// variables checked against the known ones; input files read only when regular (a FIFO without a
// writer refused without blocking) and within their byte bound.
// Method: a small CLI11 app built here (a root flag, `run` with options, `bench ssd` nested);
// config items made by CLI11's own TOML reader from strings; a file and a FIFO in a temporary
// directory, /dev/zero. (tools/cli/tests/input_limits_test.sh checks the same through the binary.)
#include "config_check.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "input_file.h"
#include "testing/test_util.h"

namespace kvtier::cli {
namespace {

TEST(ConfigCheckTest, EditDistanceAndNearestName) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("ssd-keyfile", "ssd-key-file"), 1u);
  EXPECT_EQ(NearestName("ssd-keyfile", {"ssd-bytes", "ssd-key-file", "salt"}), "ssd-key-file");
  EXPECT_EQ(NearestName("x", {}), "");
  EXPECT_EQ(NearestName(std::string(1000, 'a'), {"a"}), "");  // Too long to compare.
}

TEST(ConfigCheckTest, NestingIsBoundedOnTheText) {
  EXPECT_TRUE(CheckConfigNesting("a = 1\n[run]\nb = 2\n[bench.ssd]\nq = 4\n", 2).ok());
  Status s = CheckConfigNesting("[run]\nx = 1\n\n[a.b.c]\r\n", 2);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message(), "line 4: tables nested 3 deep (at most 2)");
  s = CheckConfigNesting("[bench.ssd]\nc.d.e = 1\n", 3);  // A dotted key adds its dots.
  EXPECT_EQ(s.message(), "line 2: tables nested 4 deep (at most 3)");
  EXPECT_TRUE(CheckConfigNesting("# [a.b.c.d]\nv = \"1.2.3.4.5\"\n", 1).ok());
}

TEST(ConfigCheckTest, ReadConfigTextStopsAtTheBound) {
  std::string text;
  std::istringstream small("abc");
  EXPECT_TRUE(ReadConfigText(small, 3, &text).ok());
  EXPECT_EQ(text, "abc");
  std::istringstream large("abcd");
  EXPECT_EQ(ReadConfigText(large, 3, &text).message(),
            "more than 3 bytes (the limit for a config file)");
}

class ConfigItemsTest : public ::testing::Test {
 protected:
  ConfigItemsTest() {
    app_.add_option("--log-level", level_);
    CLI::App* run = app_.add_subcommand("run");
    run->add_option("--ssd-key-file", value_);
    run->add_option("--cache-dir", value_);
    CLI::App* bench = app_.add_subcommand("bench");
    bench->add_subcommand("ssd")->add_option("--queue-depth", value_);
  }

  Status Check(const std::string& toml) {
    std::istringstream in(toml);
    return CheckConfigItems(app_, CLI::ConfigTOML().from_config(in));
  }

  CLI::App app_;
  std::string level_, value_;
};

TEST_F(ConfigItemsTest, KnownKeysPass) {
  EXPECT_TRUE(Check("log-level = \"info\"\n[run]\nssd-key-file = \"k\"\n[bench.ssd]\n"
                    "queue-depth = 4\n")
                  .ok());
}

TEST_F(ConfigItemsTest, UnknownKeysNameTheNearestInTheFilesSpelling) {
  EXPECT_EQ(Check("[run]\nssd-keyfile = \"k\"\n").message(),
            "unknown key 'ssd-keyfile' in [run]; did you mean 'ssd-key-file'?");
  EXPECT_EQ(Check("[run]\nssd_keyfile = \"k\"\n").message(),
            "unknown key 'ssd_keyfile' in [run]; did you mean 'ssd_key_file'?");
  EXPECT_EQ(Check("[bench.ssd]\nqueue-depht = 4\n").message(),
            "unknown key 'queue-depht' in [bench.ssd]; did you mean 'queue-depth'?");
  EXPECT_EQ(Check("log-levl = \"info\"\n").message(),
            "unknown key 'log-levl' at the top level; did you mean 'log-level'?");
}

TEST_F(ConfigItemsTest, MisplacedKeysSayWhereTheyBelong) {
  EXPECT_EQ(Check("cache-dir = \"/c\"\n").message(),
            "unknown key 'cache-dir' at the top level; it belongs in [run]");
  EXPECT_EQ(Check("[run]\nlog-level = \"info\"\n").message(),
            "unknown key 'log-level' in [run]; it belongs at the top level");
}

TEST_F(ConfigItemsTest, UnknownTablesNameTheNearest) {
  EXPECT_EQ(Check("[runn]\ncache-dir = \"/c\"\n").message(),
            "unknown table [runn]; did you mean [run]? (tables are subcommands)");
  EXPECT_EQ(Check("[bench.sdd]\n").message(),
            "unknown table [bench.sdd]; did you mean [ssd]? (tables are subcommands)");
}

TEST_F(ConfigItemsTest, VariablesAreCheckedAgainstTheKnownOnes) {
  CLI::App* run = app_.get_subcommand("run");
  run->get_option("--cache-dir")->envname("KVTIER_CACHE_DIR");
  const std::vector<std::string> known = KnownVariables(app_, {"KVTIER_CODEC"});
  EXPECT_TRUE(std::binary_search(known.begin(), known.end(), "KVTIER_CACHE_DIR"));
  EXPECT_TRUE(std::binary_search(known.begin(), known.end(), "KVTIER_REQUIRE_RESOURCES"));
  std::string a = "PATH=/bin", b = "KVTIER_CODEC=int8", c = "KVTIER_CAHCE_DIR=/c";
  std::vector<char*> env = {a.data(), b.data(), nullptr};
  EXPECT_TRUE(CheckVariables(env.data(), known).ok());
  env = {a.data(), c.data(), nullptr};
  EXPECT_EQ(CheckVariables(env.data(), known).message(),
            "the environment variable KVTIER_CAHCE_DIR is not one kvtier reads; did you mean "
            "KVTIER_CACHE_DIR? (unset it; docs/options.md lists the variables)");
}

TEST(InputFileTest, OnlyRegularFilesWithinTheBound) {
  Result<ScopedTempDir> dir = ScopedTempDir::Create();
  ASSERT_TRUE(dir.ok());
  const std::string file = dir->Join("p.txt");
  { std::ofstream(file) << "12345"; }
  std::string text;
  ASSERT_TRUE(ReadInputFile(file, "--prompt-file p", 5, &text).ok());
  EXPECT_EQ(text, "12345");
  EXPECT_EQ(ReadInputFile(file, "--prompt-file p", 4, &text).message(),
            "--prompt-file p: 5 bytes, more than the limit of 4 B");
  EXPECT_TRUE(CheckInputFile(file, "config file p", 5).ok());
  EXPECT_EQ(ReadInputFile("/dev/zero", "z", 1 << 20, &text).message(),
            "z: a character device, not a regular file (only regular files are read)");
  EXPECT_EQ(CheckInputFile(dir->path(), "d", 1).message(),
            "d: a directory, not a regular file (only regular files are read)");
  const std::string fifo = dir->Join("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer: a blocking open would hang here.
  EXPECT_EQ(ReadInputFile(fifo, "f", 1, &text).message(),
            "f: a FIFO, not a regular file (only regular files are read)");
  EXPECT_TRUE(ReadInputFile(dir->Join("missing"), "m", 1, &text).IsNotFound());
}

}  // namespace
}  // namespace kvtier::cli
