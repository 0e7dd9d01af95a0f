// Goal: the CLI's progress line says done/total, percentage, rate and ETA in the unit asked for;
// a plain (non-terminal) log gets no line for a short task and whole lines otherwise; a terminal
// line is redrawn in place and ended once; a new label shows on the next line; ScopedRemoval
// removes scratch trees unless kept; CreateScratchDir takes back only the directories it made.
// Method: Progress writes to a temporary FILE*, forced to the terminal or plain format; the
// printed bytes are read back and compared. Timing-dependent parts (rate, ETA) are matched by
// shape, not by value.
#include "progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <algorithm>

#include "interrupt.h"

namespace kvtier::cli {
namespace {

std::string ReadAll(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

TEST(ProgressTest, FormatsBytesAndDurations) {
  EXPECT_EQ(Progress::FormatBytes(512), "512 B");
  EXPECT_EQ(Progress::FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(Progress::FormatBytes(3.0 * 1024 * 1024 * 1024), "3.0 GiB");
  EXPECT_EQ(Progress::FormatDuration(42), "42s");
  EXPECT_EQ(Progress::FormatDuration(185), "3m05s");
  EXPECT_EQ(Progress::FormatDuration(3720), "1h02m");
}

TEST(ProgressTest, LineNamesDoneTotalPercentRateAndEta) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p("preload", 1000, ProgressUnit::kCount, "tokens", f, /*force_terminal=*/0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.Update(250);
  const std::string line = p.Line();
  EXPECT_EQ(line.rfind("preload: 250/1000 tokens (25%), ", 0), 0u) << line;
  EXPECT_NE(line.find(" tokens/s, ETA "), std::string::npos) << line;
  std::fclose(f);
}

TEST(ProgressTest, BytesUnitShowsRateInBytes) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p("write", 4ull << 30, ProgressUnit::kBytes, "", f, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.Update(1ull << 30);
  const std::string line = p.Line();
  EXPECT_EQ(line.rfind("write: 1.0 GiB/4.0 GiB (25%), ", 0), 0u) << line;
  EXPECT_NE(line.find("/s, ETA "), std::string::npos) << line;
  std::fclose(f);
}

TEST(ProgressTest, ShortPlainTaskPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("preload", 10, ProgressUnit::kCount, "chunks", f, /*force_terminal=*/0);
    for (uint64_t i = 1; i <= 10; ++i) p.Update(i);
  }
  EXPECT_EQ(ReadAll(f), "");
  std::fclose(f);
}

TEST(ProgressTest, TerminalLineIsRedrawnAndEndedOnce) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("demo", 3, ProgressUnit::kCount, "turns", f, /*force_terminal=*/1);
    for (uint64_t i = 1; i <= 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(120));
      p.Update(i);
    }
    p.Finish();
  }
  const std::string out = ReadAll(f);
  EXPECT_EQ(out.front(), '\r');
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("demo: 3/3 turns (100%)"), std::string::npos) << out;
  std::fclose(f);
}

TEST(ScopedRemovalTest, RemovesTreesUnlessKept) {
  const std::filesystem::path base =
      std::filesystem::temp_directory_path() / ("kvtier_scoped_removal_" + std::to_string(::getpid()));
  std::filesystem::create_directories(base / "a" / "b");
  std::ofstream(base / "a" / "b" / "f") << "x";
  std::filesystem::create_directories(base / "kept");
  {
    ScopedRemoval removal((base / "a").string());
    ScopedRemoval kept((base / "kept").string());
    kept.Keep();
  }
  EXPECT_FALSE(std::filesystem::exists(base / "a"));
  EXPECT_TRUE(std::filesystem::exists(base / "kept"));
  std::filesystem::remove_all(base);
}

TEST(ProgressTest, SetLabelNamesTheNextLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p("bench ssd write", 4, ProgressUnit::kCount, "blocks", f, /*force_terminal=*/0);
  p.Update(1);
  p.SetLabel("bench ssd read");
  p.Update(3);
  EXPECT_EQ(p.Line().rfind("bench ssd read: 3/4 blocks (75%)", 0), 0u) << p.Line();
  std::fclose(f);
}

TEST(ScopedRemovalTest, CreateScratchDirTakesBackOnlyWhatItMade) {
  const std::filesystem::path base =
      std::filesystem::temp_directory_path() / ("kvtier_scratch_dir_" + std::to_string(::getpid()));
  std::filesystem::create_directories(base / "existing");
  std::ofstream(base / "existing" / "users-file") << "x";
  {
    ScopedRemoval removal;
    // An existing directory: nothing to take back, the user's file stays.
    ASSERT_TRUE(CreateScratchDir((base / "existing").string(), &removal).ok());
    // Missing parents: the topmost one made goes, with what is put inside.
    ASSERT_TRUE(CreateScratchDir((base / "new" / "deep" / "dir").string(), &removal).ok());
    EXPECT_TRUE(std::filesystem::is_directory(base / "new" / "deep" / "dir"));
    std::ofstream(base / "new" / "deep" / "dir" / "scratch") << "x";
    std::ofstream(base / "existing" / "users-file-2") << "x";
    // A regular file where the directory should be: one error naming it.
    const Status s = CreateScratchDir((base / "existing" / "users-file").string(), &removal);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("users-file"), std::string::npos) << s.ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(base / "new"));
  EXPECT_TRUE(std::filesystem::exists(base / "existing" / "users-file"));
  EXPECT_TRUE(std::filesystem::exists(base / "existing" / "users-file-2"));
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace kvtier::cli
