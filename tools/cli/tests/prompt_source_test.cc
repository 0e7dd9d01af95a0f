// Goal: `kvtier preload --trace` reads a trace as the documentation says: JSON Lines when the first
// non-blank line starts with '{' (each line an object with a "prompt" string), plain text (one
// prompt per line) otherwise; blank lines skipped, CRLF endings stripped; a bad JSON line is an
// error naming its line; an empty trace or document is an error.
// Method: ParseTrace over strings; ReadDocument and ReadTrace over files written to a temporary
// directory.
#include "prompt_source.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace kvtier::cli {
namespace {

std::vector<std::string> Texts(const std::vector<PromptText>& prompts) {
  std::vector<std::string> out;
  for (const PromptText& p : prompts) out.push_back(p.text);
  return out;
}

TEST(PromptSourceTest, PlainTextIsOnePromptPerLine) {
  Result<std::vector<PromptText>> r =
      ParseTrace("Once upon a time\r\n\n  \nThe dog ran. {not json}\nlast line", "t");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Texts(*r),
            (std::vector<std::string>{"Once upon a time", "The dog ran. {not json}", "last line"}));
  EXPECT_EQ((*r)[0].line, 1u);
  EXPECT_EQ((*r)[1].line, 4u);
  EXPECT_EQ((*r)[2].line, 5u);
}

TEST(PromptSourceTest, JsonLinesWhenTheFirstLineIsAnObject) {
  Result<std::vector<PromptText>> r = ParseTrace(
      "\n  {\"prompt\": \"Once upon a time\", \"id\": 7}\n{\"prompt\": \"a\\nb\"}\n\n", "t");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Texts(*r), (std::vector<std::string>{"Once upon a time", "a\nb"}));
  EXPECT_EQ((*r)[0].line, 2u);
  EXPECT_EQ((*r)[1].line, 3u);
}

TEST(PromptSourceTest, BadJsonLinesNameTheirLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"prompt\": \"a\"}\n{\"prompt\": \"b\"\n", "trace.jsonl line 2: not valid JSON"},
      {"{\"prompt\": \"a\"}\n\n[1, 2]\n", "trace.jsonl line 3: not a JSON object"},
      {"{\"text\": \"a\"}\n", "trace.jsonl line 1: no \"prompt\" string"},
      {"{\"prompt\": 5}\n", "trace.jsonl line 1: no \"prompt\" string"},
      {"{\"prompt\": \"\"}\n", "trace.jsonl line 1: an empty \"prompt\""},
      {"{\"prompt\": \"a\"}\nplain words\n", "trace.jsonl line 2: not valid JSON"},
  };
  for (const auto& [text, want] : cases) {
    Result<std::vector<PromptText>> r = ParseTrace(text, "trace.jsonl");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
  }
}

TEST(PromptSourceTest, EmptyInputsAreErrors) {
  for (const char* text : {"", "\n\n", "  \r\n\t\n"}) {
    Result<std::vector<PromptText>> r = ParseTrace(text, "t");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("no prompts"), std::string::npos) << r.status().ToString();
  }
  char dir[] = "/tmp/kvtier-prompt-source-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string blank = std::string(dir) + "/blank.txt";
  const std::string doc = std::string(dir) + "/doc.txt";
  std::ofstream(blank) << " \n\n";
  std::ofstream(doc) << "Once upon a time\n\nthere was a dog.\n";
  Result<std::vector<PromptText>> r = ReadDocument(blank);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the document is empty"), std::string::npos);
  r = ReadDocument(doc);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].text, "Once upon a time\n\nthere was a dog.\n");  // Whole, as run -f reads it.
  r = ReadTrace(doc);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 2u);
  r = ReadTrace(std::string(dir) + "/missing.txt");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing.txt"), std::string::npos);
  ::unlink(blank.c_str());
  ::unlink(doc.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace kvtier::cli
