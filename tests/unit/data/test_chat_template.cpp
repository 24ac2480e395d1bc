// The model's own chat template (issue 36, item 6): the Jinja subset that
// tokenizer_config.json chat templates use, rendered as transformers'
// apply_chat_template renders them (every expected string below is what
// jinja2 3.1 gives with trim_blocks and lstrip_blocks, as transformers sets
// it up), the loss mask over the assistant turns, and `ftrain-prep instruct
// --template chat` reading the template beside the tokenizer. Also the
// warning for a tokenizer whose eos differs from the model's config.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "data/chat_template.hpp"
#include "data/instruction_prep.hpp"
#include "data/prep_cli.hpp"
#include "data/text_tokenizer.hpp"
#include "data/token_file.hpp"

using namespace ftrain;
using namespace ftrain::data;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kTemplates = FTRAIN_TEST_CHAT_TEMPLATES;  // tests/interop/chat_templates
const std::string kFixtures = FTRAIN_TEST_FIXTURES;         // tests/unit/data/fixtures

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ftrain_chat_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

struct PrepResult {
  int status = 0;
  std::string out, err;
};

PrepResult run_prep(std::vector<std::string> args) {
  args.insert(args.begin(), "ftrain-prep");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  PrepResult r;
  r.status = prep_main(static_cast<int>(argv.size()), argv.data());
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

struct Document {
  std::vector<std::uint32_t> ids;
  std::vector<std::uint8_t> trained;
};

std::vector<Document> documents(const std::string& path) {
  const TokenFile f(path);
  std::vector<Document> out;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(f.header().n_documents); ++d) {
    Document doc;
    for (std::int64_t i = f.document_begin(d); i < f.document_begin(d + 1); ++i) {
      std::int32_t id = 0;
      f.read(i, 1, &id);
      doc.ids.push_back(static_cast<std::uint32_t>(id));
      doc.trained.push_back(f.trained(i) ? 1 : 0);
    }
    out.push_back(std::move(doc));
  }
  return out;
}

const char* kConversation =
    R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}, )"
    R"({"role": "assistant", "content": "Four."}, {"role": "user", "content": "And 3+3?"}, )"
    R"({"role": "assistant", "content": "Six."}]})";

TEST(ChatTemplateInterpreter, RendersAsJinjaDoesWithTransformersSettings) {
  const json context = json::parse(
      R"({"messages": [{"role": "system", "content": "  S  "}, {"role": "user", "content": "U1"}, )"
      R"({"role": "assistant", "content": "A1"}], "bos_token": "<s>", "n": 7, "flag": true, "empty": ""})");
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"J({% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}:{{ m['role'] }}/{{ m.content }};{% endfor %})J",
       R"J(01TrueFalse3:system/  S  ;12FalseFalse3:user/U1;23FalseTrue3:assistant/A1;)J"},
      {R"J({% for m in messages %}
  {% if m.role == 'user' %}
    U
  {% elif m.role == 'system' %}
    S
  {% else %}
    A
  {% endif %}
{% endfor %}
)J",
       R"J(    S
    U
    A
)J"},
      {R"J(a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e
)J",
       R"J(abc d e)J"},
      {R"J({% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% set x = m.role %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.found }} {{ ns.n }} {{ x is defined }})J",
       R"J(True 3 False)J"},
      {R"J({% set x = 1 %}{% for m in messages %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }})J",
       R"J(2221)J"},
      {R"J({% for m in messages %}{% if loop.index0 == 1 %}{% continue %}{% endif %}{% if loop.last %}{% break %}{% endif %}{{ m.role }}{% endfor %})J",
       R"J(system)J"},
      {R"J({{ messages[0].content | trim }}|{{ messages | length }}|{{ 'abc' | upper }}|{{ ['a','b'] | join('-') }}|{{ missing | default('dflt') }}|{{ empty | default('e', true) }})J",
       R"J(S|3|ABC|a-b|dflt|e)J"},
      {R"J({{ missing is defined }} {{ missing is not defined }} {{ none is none }} {{ n is number }} {{ 'x' is string }} {{ n is odd }})J",
       R"J(False True True True True True)J"},
      {R"J({{ 'ss' in 'class' }} {{ 'user' not in ['system', 'assistant'] }} {{ 'role' in messages[0] }})J",
       R"J(True True True)J"},
      {R"J({{ messages[1:] | length }} {{ messages[-1].role }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[1:4] }} {{ [1,2,3,4][::2] }})J",
       R"J(2 assistant fedcba bcd [1, 3])J"},
      {R"J({{ '  x y  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'abc'.startswith('ab') }}|{{ 'a,b,c'.split(',') }}|{{ 'Hello'.lower() }}|{{ 'a b'.title() }})J",
       R"J(x y|hi|True|['a', 'b', 'c']|hello|A B)J"},
      {R"J({{ 7 % 3 }} {{ -7 % 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1 ~ 'a' ~ true }} {{ 3 * 'ab' }} {{ n - 10 }})J",
       R"J(1 2 3 -4 1024 3.5 1aTrue ababab -3)J"},
      {R"J({{ 'yes' if flag else 'no' }} {{ 'yes' if not flag else 'no' }} {{ (n > 5) and (n < 10) }} {{ n == 7.0 }} {{ none }} {{ true }})J",
       R"J(yes no True True None True)J"},
      {R"J({# a comment #}
  {# indented comment #}
X{{ "dq\n" }}Y{{ 'a' 'b' }})J",
       R"J(Xdq
Yab)J"},
      {R"J({% for i in range(3) %}{{ i }}{% endfor %}{{ (messages | first).role }}{{ (messages | last).role }})J",
       R"J(012systemassistant)J"},
      {R"J({% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% endif %}{{ sys | trim }}{{ bos_token + 'x' }})J",
       R"J(S<s>x)J"},
  };
  // String escapes as Jinja decodes them (Python's unicode-escape).
  cases.emplace_back(R"J({{ 'a\u00e9b\x41\t|' ~ "q\"q" ~ 'it\'s' }})J", "a\xc3\xa9" "bA\t|q\"qit's");
  // Python's whitespace is Unicode's: trim and strip() remove NBSP and U+3000 too.
  cases.emplace_back("{{ '\xc2\xa0 x\xe3\x80\x80' | trim }}|{{ '\xc2\xa0 x\xe3\x80\x80'.rstrip() }}", "x|\xc2\xa0 x");
  // Dict literals, and tojson as transformers defines it (json.dumps, ensure_ascii off).
  cases.emplace_back(R"J({{ 'a"b\né' | tojson }}|{{ [1, 2.5, true, none, 'x'] | tojson }}|{{ {'k': [1, {'n': 'v'}]} | tojson }}|{{ {'k': [1, 2]} | tojson(indent=2) }}|{{ [] | tojson }}|{% set d = {'role': 'x'} %}{{ d.role }})J",
                     R"J("a\"b\né"|[1, 2.5, true, null, "x"]|{"k": [1, {"n": "v"}]}|{
  "k": [
    1,
    2
  ]
}|[]|x)J");
  // A tag ends at its close outside string literals.
  cases.emplace_back(R"J({{ '}}' ~ "%}" }}{% if '%}' %}y{% endif %}{# '}} #})J", "}}%}y");
  // transformers' globals are defined; strftime_now is the local time.
  {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    cases.emplace_back("{{ strftime_now is defined }} {{ strftime_now('%Y') }}",
                       "True " + std::to_string(1900 + local.tm_year));
  }
  for (const auto& [source, expected] : cases) {
    std::string got;
    try {
      got = ChatTemplate(source, "case").render(context);
    } catch (const UserError& e) {
      got = std::string("error: ") + e.what();
    }
    EXPECT_EQ(got, expected) << "template: " << source;
  }
}

TEST(ChatTemplateInterpreter, UnsupportedSyntaxNamesTheTemplateAndPosition) {
  const auto message = [](const std::string& source) {
    return error_of([&] { ChatTemplate(source, "models/x/tokenizer_config.json chat_template").render(json::object()); });
  };
  std::string m = message("ok\n  {% macro f() %}{% endmacro %}");
  EXPECT_NE(m.find("models/x/tokenizer_config.json chat_template: line 2, column 5: {% macro %} is not supported"),
            std::string::npos) << m;
  m = message("{{ messages | selectattr('role') }}");
  EXPECT_NE(m.find("line 1, column 13: filter 'selectattr' is not supported"), std::string::npos) << m;
  m = message("{% if x %}unclosed");
  EXPECT_NE(m.find("ends inside a block; expected {% elif %}"), std::string::npos) << m;
  m = message("x{% endfor %}");
  EXPECT_NE(m.find("line 1, column 4: {% endfor %} without the block it would close"), std::string::npos) << m;
  m = message("{{ {'b': 1, 'a': 2} | tojson }}");
  EXPECT_NE(m.find("tojson of a mapping with several keys"), std::string::npos) << m;
  m = message("{{ 'a' + 1 }}");
  EXPECT_NE(m.find("line 1, column 8: unsupported operand types for +: string and int"), std::string::npos) << m;
  m = message("text {{ x");
  EXPECT_NE(m.find("line 1, column 6: '{{' is never closed by '}}'"), std::string::npos) << m;
  m = message("{{ raise_exception('Conversation roles must alternate') }}");
  EXPECT_NE(m.find("the chat template raised an exception: Conversation roles must alternate"), std::string::npos) << m;
}

// Llama 2 chat's template with the byte tokenizer: the text, byte for byte,
// and the mask over each answer and the " </s>" the template writes after it.
TEST_F(ChatTemplateTest, Llama2ChatTextAndMask) {
  const ModelChatTemplate model = load_model_chat_template(kTemplates + "/llama2_chat/tokenizer_config.json");
  const json messages = json::parse(kConversation)["messages"];
  const RenderedChat chat = render_model_chat(messages, model, "in.jsonl:1");
  EXPECT_EQ(chat.text,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+2? [/INST] Four. </s><s>[INST] And 3+3? [/INST] Six. </s>");
  const auto bytes = make_byte_tokenizer();
  std::vector<std::uint32_t> ids;
  std::vector<std::uint8_t> trained;
  encode_rendered_chat(chat, *bytes, ids, trained);
  std::string trained_text, masked_text;
  for (std::size_t i = 0; i < ids.size(); ++i) (trained[i] ? trained_text : masked_text) += static_cast<char>(ids[i]);
  EXPECT_EQ(trained_text, " Four. </s> Six. </s>");
  EXPECT_EQ(masked_text, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is 2+2? [/INST]<s>[INST] And 3+3? [/INST]");
  // Roles out of order: the template's own raise_exception, with the line.
  const json bad = json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, )"
                               R"({"role": "assistant", "content": "c"}])");
  const std::string m = error_of([&] { render_model_chat(bad, model, "in.jsonl:7"); });
  EXPECT_NE(m.find("in.jsonl:7: rendering the first"), std::string::npos) << m;
  EXPECT_NE(m.find("raised an exception: Conversation roles must alternate user/assistant"), std::string::npos) << m;
}

// A template with {% generation %} blocks: what they write is trained, not
// the whole turn (transformers' return_assistant_tokens_mask).
TEST_F(ChatTemplateTest, GenerationBlocksDecideTheMask) {
  write_text(path("gen.json"),
             R"({"chat_template": "{% for m in messages %}{% if m.role == 'assistant' %}A:{% generation %}{{ m.content }})"
             R"({% endgeneration %}|{% else %}U:{{ m.content }}|{% endif %}{% endfor %}"})");
  const ModelChatTemplate model = load_model_chat_template(path("gen.json"));
  const json messages = json::parse(R"([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, )"
                                    R"({"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}])");
  const RenderedChat chat = render_model_chat(messages, model, "in.jsonl:1");
  EXPECT_EQ(chat.text, "U:q1|A:a1|U:q2|A:a2|");
  EXPECT_EQ(chat.trained, (std::vector<std::pair<std::size_t, std::size_t>>{{7, 9}, {17, 19}}));
}

// `--template chat` with a Llama 3 model directory (tokenizer.json and its
// tokenizer_config.json): Llama 3 Instruct's own format, not Zephyr's
// markers; the template's bos once, no bos added by the tokenizer; the
// answers and their <|eot_id|> trained, then the tokenizer's eos.
TEST_F(ChatTemplateTest, Llama3InstructFromTheModelDirectory) {
  fs::create_directories(path("model"));
  fs::copy_file(kFixtures + "/llama3_style_tokenizer.json", path("model/tokenizer.json"));
  fs::copy_file(kTemplates + "/llama3_instruct/tokenizer_config.json", path("model/tokenizer_config.json"));
  write_text(path("in.jsonl"), std::string(kConversation) + "\n");
  const PrepResult r = run_prep({"instruct", "--tokenizer", path("model"), "--template", "chat", "--out",
                                 path("out.tok"), path("in.jsonl")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("chat template: " + path("model") + "/tokenizer_config.json chat_template"), std::string::npos)
      << r.out;
  const auto tokenizer = load_tokenizer_file(path("model"));
  const std::vector<Document> docs = documents(path("out.tok"));
  ASSERT_EQ(docs.size(), 1u);
  const Document& d = docs[0];
  ASSERT_GE(d.ids.size(), 3u);
  EXPECT_EQ(d.ids.back(), tokenizer->eos_id());
  EXPECT_EQ(d.trained.back(), 1);
  const std::vector<std::uint32_t> body(d.ids.begin(), d.ids.end() - 1);
  EXPECT_EQ(tokenizer->decode(body),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nFour.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nSix.<|eot_id|>");
  EXPECT_EQ(std::count(d.ids.begin(), d.ids.end(), 128000u), 1) << "one bos: the template's";
  std::vector<std::uint32_t> trained;
  for (std::size_t i = 0; i + 1 < d.ids.size(); ++i)
    if (d.trained[i]) trained.push_back(d.ids[i]);
  EXPECT_EQ(tokenizer->decode(trained), "Four.<|eot_id|>Six.<|eot_id|>");
  // The ids are the whole text encoded at once, special tokens included.
  std::vector<std::uint32_t> whole;
  std::vector<std::size_t> ends;
  tokenizer->encode_special(tokenizer->decode(body), whole, ends);
  EXPECT_EQ(whole, body);
}

TEST_F(ChatTemplateTest, WithoutATemplateChatSaysWhereItLookedAndWhatToDo) {
  fs::create_directories(path("model"));
  fs::copy_file(kFixtures + "/llama3_style_tokenizer.json", path("model/tokenizer.json"));
  write_text(path("in.jsonl"), std::string(kConversation) + "\n");
  const PrepResult r = run_prep({"instruct", "--tokenizer", path("model/tokenizer.json"), "--template", "chat",
                                 "--out", path("out.tok"), path("in.jsonl")});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no chat_template in " + path("model") + "/tokenizer_config.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--chat-template FILE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--template zephyr"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("out.tok")));
  // Zephyr's markers remain, by name.
  const PrepResult z = run_prep({"instruct", "--tokenizer", "bytes", "--template", "zephyr", "--out",
                                 path("z.tok"), path("in.jsonl")});
  EXPECT_EQ(z.status, 0) << z.err;
}

// Llama 2's template through a SentencePiece model (Llama 2's tokenizer is
// one): <s> and </s> in the text are the bos and eos ids, not the letters,
// the stretches between them are encoded as SentencePiece encodes them, and
// the template's final </s> is the writer's eos, not a second one.
TEST_F(ChatTemplateTest, Llama2ThroughSentencePieceUsesTheSpecialIds) {
  if (std::system("command -v spm_train > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "spm_train not found (Debian package 'sentencepiece'); SentencePiece test skipped";
  {
    std::ofstream corpus(path("corpus.txt"));
    const char* words[] = {"what", "is", "two", "and", "four", "six", "three", "be", "brief", "INST", "SYS"};
    for (int line = 0; line < 300; ++line) {
      for (int w = 0; w < 6; ++w) corpus << (w ? " " : "") << words[(line * 3 + w * 7 + line / 5) % 11];
      corpus << " [/INST] <<SYS>>\n";
    }
  }
  const std::string command = "spm_train --input=" + path("corpus.txt") + " --model_prefix=" + path("tiny") +
                              " --vocab_size=60 --model_type=bpe --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1"
                              " --minloglevel=2 > " + path("spm_train.log") + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "spm_train failed; see " << path("spm_train.log");
  const auto spm = load_sentencepiece_tokenizer(path("tiny.model"));
  const std::string text = "<s>[INST] what is two [/INST] four </s><s>[INST] six [/INST] three </s>";
  std::vector<std::uint32_t> ids, part;
  std::vector<std::size_t> ends;
  spm->encode_special(text, ids, ends);
  std::vector<std::uint32_t> want{1};
  spm->encode("[INST] what is two [/INST] four ", part);
  want.insert(want.end(), part.begin(), part.end());
  want.insert(want.end(), {2, 1});
  spm->encode("[INST] six [/INST] three ", part);
  want.insert(want.end(), part.begin(), part.end());
  want.push_back(2);
  EXPECT_EQ(ids, want);
  ASSERT_EQ(ends.size(), ids.size());
  EXPECT_EQ(ends.back(), text.size());
  EXPECT_TRUE(std::is_sorted(ends.begin(), ends.end()));

  const char* conversation =
      R"({"messages": [{"role": "user", "content": "what is two"}, {"role": "assistant", "content": "four"}, )"
      R"({"role": "user", "content": "six"}, {"role": "assistant", "content": "three"}]})";
  write_text(path("in.jsonl"), std::string(conversation) + "\n");
  const PrepResult r = run_prep({"instruct", "--tokenizer", "spm", "--model", path("tiny.model"), "--template", "chat",
                                 "--chat-template", kTemplates + "/llama2_chat/tokenizer_config.json", "--out",
                                 path("out.tok"), path("in.jsonl")});
  ASSERT_EQ(r.status, 0) << r.err;
  const Document d = documents(path("out.tok")).at(0);
  EXPECT_EQ(d.ids, want) << "the text above is what the template renders for this conversation";
  // Trained: " four </s>" and " three </s>" (the final </s> is the writer's).
  std::vector<std::uint32_t> trained;
  for (std::size_t i = 0; i < d.ids.size(); ++i)
    if (d.trained[i]) trained.push_back(d.ids[i]);
  EXPECT_EQ(std::count(trained.begin(), trained.end(), 2u), 2);
  EXPECT_EQ(std::count(trained.begin(), trained.end(), 1u), 0);
  EXPECT_EQ(d.trained.front(), 0);
}

// Where a template can come from: a list of named templates ("default" is
// taken), chat_template.jinja beside a tokenizer_config.json without one
// (transformers' newer layout, special tokens from the config), and nowhere.
TEST_F(ChatTemplateTest, TemplateSources) {
  write_text(path("named.json"), R"({"eos_token": "</s>", "chat_template": [{"name": "tool_use", "template": "T"}, )"
                                 R"({"name": "default", "template": "{{ messages[0].content }}{{ eos_token }}"}]})");
  const json one = json::parse(R"([{"role": "user", "content": "hi"}])");
  ModelChatTemplate named = load_model_chat_template(path("named.json"));
  json context = named.special_tokens;
  context["messages"] = one;
  EXPECT_EQ(named.chat_template->render(context), "hi</s>");

  fs::create_directories(path("model"));
  write_text(path("model/tokenizer_config.json"), R"({"bos_token": {"content": "<B>", "lstrip": false}})");
  write_text(path("model/chat_template.jinja"), "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}\n");
  std::string looked_in;
  const auto found = find_model_chat_template(path("model/tokenizer.json"), looked_in);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(looked_in, path("model"));
  context = found->special_tokens;
  context["messages"] = one;
  EXPECT_EQ(found->chat_template->render(context), "<B>[hi]");  // the file's last newline dropped, as Jinja does

  fs::remove(path("model/chat_template.jinja"));
  EXPECT_EQ(find_model_chat_template(path("model"), looked_in), nullptr);
  write_text(path("bad.json"), R"({"chat_template": "{% for %}"})");
  const std::string m = error_of([&] { load_model_chat_template(path("bad.json")); });
  EXPECT_NE(m.find(path("bad.json") + " chat_template: line 1, column 8: expected a name, found the end of the tag"), std::string::npos) << m;
}

// A model directory whose config.json names another eos than the tokenizer's.
TEST_F(ChatTemplateTest, WarnsWhenConfigJsonEosDiffersFromTheTokenizers) {
  fs::create_directories(path("model"));
  fs::copy_file(kFixtures + "/llama3_style_tokenizer.json", path("model/tokenizer.json"));
  write_text(path("in.jsonl"), "{\"text\": \"hello\"}\n");
  const auto prep = [&] {
    return run_prep({"text", "--tokenizer", path("model/tokenizer.json"), "--jsonl", "--out", path("out.tok"),
                     path("in.jsonl")});
  };
  write_text(path("model/config.json"), R"({"model_type": "llama", "eos_token_id": 128009})");
  PrepResult r = prep();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: the tokenizer's eos id is 128001, but " + path("model") +
                       "/config.json has eos_token_id 128009"),
            std::string::npos) << r.err;
  write_text(path("model/config.json"), R"({"model_type": "llama", "eos_token_id": [128001, 128008, 128009]})");
  r = prep();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  write_text(path("model/config.json"), R"({"model_type": "llama", "eos_token_id": [2]})");
  r = prep();
  EXPECT_NE(r.err.find("has eos_token_id [2]"), std::string::npos) << r.err;
}

}  // namespace
