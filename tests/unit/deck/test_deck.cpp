// Input deck parser: every grammar feature, every command, every kind of
// error. Errors are checked for the exact "FILE:LINE: " prefix, the
// offending word and the expectation, and for being a single line.
// Files for include/data tests live in a fresh temporary directory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "base/error.hpp"
#include "deck/commands.hpp"
#include "deck/diagnostics.hpp"
#include "deck/parser.hpp"

using namespace ftrain;
namespace fs = std::filesystem;

namespace {

const std::string kRequired = "model llama preset tiny\nmax_steps 10\n";

RunConfig parse(const std::string& text, const DeckVariables& vars = {}) {
  return parse_deck_string(text, "tiny.in", vars);
}

// The UserError message of parsing `text`, or a test failure.
std::string error_of(const std::string& text, const DeckVariables& vars = {},
                     const std::string& name = "tiny.in") {
  try {
    parse_deck_string(text, name, vars);
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "multi-line error: " << message;
    return message;
  }
  ADD_FAILURE() << "no error for deck:\n" << text;
  return "";
}

// Expects an error at tiny.in:line whose message contains every fragment.
void expect_error(const std::string& text, int line, std::initializer_list<std::string> fragments,
                  const DeckVariables& vars = {}) {
  const std::string message = error_of(text, vars);
  const std::string prefix = "tiny.in:" + std::to_string(line) + ": ";
  EXPECT_EQ(message.rfind(prefix, 0), 0u) << "expected prefix '" << prefix << "' in: " << message;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "expected '" << fragment << "' in: " << message;
  }
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ftrain_deck_test_XXXXXX").string();
    const char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to `relative` (creating folders) and returns its path.
  std::string write(const std::string& relative, const std::string& text) const {
    const fs::path file = path_ / relative;
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

// ---- minimal deck, defaults, resolved lines ----------------------------------

TEST(Deck, MinimalDeckKeepsDefaults) {
  const RunConfig config = parse(kRequired);
  const RunConfig defaults;
  EXPECT_EQ(config.model.name, "llama");
  EXPECT_EQ(config.model.preset, "tiny");
  EXPECT_TRUE(config.model.overrides.empty());
  EXPECT_EQ(config.model.where.str(), "tiny.in:1");
  EXPECT_EQ(config.max_steps, 10);
  EXPECT_EQ(config.precision, defaults.precision);
  EXPECT_EQ(config.optimizer.lr, defaults.optimizer.lr);
  EXPECT_EQ(config.fsdp.strategy, defaults.fsdp.strategy);
  EXPECT_EQ(config.batch.micro_batch, defaults.batch.micro_batch);
  EXPECT_EQ(config.deck_path, "tiny.in");
  ASSERT_EQ(config.resolved_lines.size(), 2u);
  EXPECT_EQ(config.resolved_lines[0], "tiny.in:1: model llama preset tiny");
  EXPECT_EQ(config.resolved_lines[1], "tiny.in:2: max_steps 10");
}

TEST(Deck, EveryCommandFillsItsFields) {
  TempDir dir;
  const std::string train = dir.write("train.bin", "x");
  const std::string val = dir.write("val.bin", "x");
  const std::string weights = dir.write("model.safetensors", "x");
  const std::string deck =
      "model llama preset llama2-7b num_hidden_layers 2 rope_theta 500000\n"
      "precision bf16\n"
      "seed 18446744073709551615\n"
      "data tokens " + train + " packing off shuffle on\n"
      "eval tokens " + val + " every 50\n"
      "batch micro 4 accumulate 8 seq_len 2048\n"
      "optimizer adamw lr 1e-3 beta1 0.8 beta2 0.999 eps 1e-6 weight_decay 0.1\n"
      "schedule cosine warmup_ratio 0.05 min_lr 1e-5\n"
      "clip_grad_norm 1.0\n"
      "max_steps 1000\n"
      "init safetensors " + weights + "\n"
      "fsdp hybrid_shard backward_prefetch backward_post forward_prefetch on limit_all_gathers 3 "
      "shard_group_size 8 param_dtype bf16 reduce_dtype bf16 sync_module_states on\n"
      "activation_checkpointing every 2\n"
      "log every 5 rank_files on\n"
      "run_dir runs/demo\n"
      "peak_tflops 989.5\n"
      "cross_entropy vocab_chunk 8192\n";
  const RunConfig c = parse(deck);
  EXPECT_EQ(c.model.name, "llama");
  EXPECT_EQ(c.model.preset, "llama2-7b");
  ASSERT_EQ(c.model.overrides.size(), 2u);
  EXPECT_EQ(c.model.overrides[0], (std::pair<std::string, std::string>{"num_hidden_layers", "2"}));
  EXPECT_EQ(c.model.overrides[1], (std::pair<std::string, std::string>{"rope_theta", "500000"}));
  EXPECT_EQ(c.precision, deck::Precision::bf16);
  EXPECT_EQ(c.seed, 18446744073709551615ull);
  EXPECT_EQ(c.data.kind, deck::DataKind::tokens);
  EXPECT_EQ(c.data.path, train);
  EXPECT_FALSE(c.data.packing);
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_EQ(c.data.where.str(), "tiny.in:4");
  EXPECT_EQ(c.eval.path, val);
  EXPECT_EQ(c.eval.every, 50);
  EXPECT_EQ(c.batch.micro_batch, 4);
  EXPECT_EQ(c.batch.grad_accum, 8);
  EXPECT_EQ(c.batch.seq_len, 2048);
  EXPECT_EQ(c.optimizer.name, deck::OptimizerKind::adamw);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.schedule.kind, deck::ScheduleKind::cosine);
  ASSERT_TRUE(c.schedule.warmup_ratio.has_value());
  EXPECT_DOUBLE_EQ(*c.schedule.warmup_ratio, 0.05);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr, 1e-5);
  EXPECT_DOUBLE_EQ(c.clip_grad_norm, 1.0);
  EXPECT_EQ(c.max_steps, 1000);
  EXPECT_EQ(c.init.kind, deck::InitKind::safetensors);
  EXPECT_EQ(c.init.path, weights);
  EXPECT_EQ(c.init.where.str(), "tiny.in:11");
  EXPECT_EQ(c.fsdp.strategy, deck::ShardingStrategy::hybrid_shard);
  EXPECT_EQ(c.fsdp.backward_prefetch, deck::BackwardPrefetch::backward_post);
  EXPECT_TRUE(c.fsdp.forward_prefetch);
  EXPECT_EQ(c.fsdp.limit_all_gathers, 3);
  EXPECT_EQ(c.fsdp.shard_group_size, 8);
  EXPECT_EQ(c.fsdp.param_dtype, deck::CommDtype::bf16);
  EXPECT_EQ(c.fsdp.reduce_dtype, deck::CommDtype::bf16);
  EXPECT_TRUE(c.fsdp.sync_module_states);
  EXPECT_EQ(c.fsdp.where.str(), "tiny.in:12");
  EXPECT_EQ(c.activation_checkpointing, deck::ActivationCheckpointing::every);
  EXPECT_EQ(c.activation_checkpointing_every, 2);
  EXPECT_EQ(c.log_every, 5);
  EXPECT_TRUE(c.per_rank_logs);
  EXPECT_EQ(c.run_dir, "runs/demo");
  ASSERT_TRUE(c.peak_tflops.has_value());
  EXPECT_DOUBLE_EQ(*c.peak_tflops, 989.5);
  EXPECT_EQ(c.vocab_chunk, 8192);
  EXPECT_EQ(c.resolved_lines.size(), 17u);
}

TEST(Deck, OtherForms) {
  RunConfig c = parse(kRequired + "init random std 0.01\nactivation_checkpointing on\n"
                                  "schedule linear warmup_steps 3\nfsdp no_shard\n");
  EXPECT_EQ(c.init.kind, deck::InitKind::random);
  EXPECT_DOUBLE_EQ(c.init.std, 0.01);
  EXPECT_EQ(c.activation_checkpointing, deck::ActivationCheckpointing::on);
  EXPECT_EQ(c.activation_checkpointing_every, 1);
  EXPECT_EQ(c.schedule.kind, deck::ScheduleKind::linear);
  EXPECT_EQ(c.schedule.warmup_steps, 3);
  EXPECT_FALSE(c.schedule.warmup_ratio.has_value());
  EXPECT_EQ(c.fsdp.strategy, deck::ShardingStrategy::no_shard);
  c = parse(kRequired + "activation_checkpointing off\nfsdp shard_grad_op backward_prefetch none\n"
                        "optimizer adamw lr +2.5e-4\n");
  EXPECT_EQ(c.activation_checkpointing, deck::ActivationCheckpointing::off);
  EXPECT_EQ(c.activation_checkpointing_every, 0);
  EXPECT_EQ(c.fsdp.backward_prefetch, deck::BackwardPrefetch::none);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 2.5e-4);
}

// RoPE positions under the document mask: restart unless the line says
// continue; without the mask the keyword is refused naming the line.
TEST(Deck, DocumentMaskPositions) {
  TempDir dir;
  const std::string train = dir.write("train.bin", "x");
  RunConfig c = parse(kRequired + "data tokens " + train + " document_mask on\n");
  EXPECT_TRUE(c.data.document_mask);
  EXPECT_EQ(c.data.positions, deck::RopePositions::restart);
  c = parse(kRequired + "data tokens " + train + " document_mask on positions continue\n");
  EXPECT_EQ(c.data.positions, deck::RopePositions::run_on);
  expect_error(kRequired + "data tokens " + train + " positions restart\n", 3,
               {"'positions' is only meaningful with 'document_mask on'"});
  expect_error(kRequired + "data tokens " + train + " document_mask on positions contine\n", 3,
               {"(did you mean 'continue'?)"});
}

// Issue 19: the device communicator and the collective watchdog's timeout,
// in minutes or seconds (the form word is the unit).
TEST(Deck, DeviceCommAndCollectiveTimeout) {
  RunConfig c = parse(kRequired);
  EXPECT_EQ(c.device_comm, deck::DeviceComm::nccl);
  EXPECT_DOUBLE_EQ(c.collective_timeout_seconds, 600);
  c = parse(kRequired + "device_comm mpi\ncollective_timeout minutes 2.5\n");
  EXPECT_EQ(c.device_comm, deck::DeviceComm::mpi);
  EXPECT_DOUBLE_EQ(c.collective_timeout_seconds, 150);
  c = parse(kRequired + "collective_timeout seconds 45\n");
  EXPECT_DOUBLE_EQ(c.collective_timeout_seconds, 45);
  EXPECT_NE(error_of(kRequired + "collective_timeout hours 1\n").find("hours"), std::string::npos);
  EXPECT_NE(error_of(kRequired + "collective_timeout seconds 0\n").find("0"), std::string::npos);
  EXPECT_NE(error_of(kRequired + "device_comm gloo\n").find("gloo"), std::string::npos);
}

// ---- grammar ---------------------------------------------------------------------

TEST(DeckGrammar, CommentsBlankLinesAndHashInsideQuotes) {
  const RunConfig c = parse(
      "# a comment line\n"
      "\n"
      "   \t\n"
      "model llama   preset tiny   # trailing comment\n"
      "max_steps 10#glued comment\n"
      "run_dir 'a#b'\n");
  EXPECT_EQ(c.model.preset, "tiny");
  EXPECT_EQ(c.max_steps, 10);
  EXPECT_EQ(c.run_dir, "a#b");
  EXPECT_EQ(c.model.where.line, 4);
  ASSERT_EQ(c.resolved_lines.size(), 3u);
  EXPECT_EQ(c.resolved_lines[2], "tiny.in:6: run_dir 'a#b'");
}

TEST(DeckGrammar, ContinuationJoinsLinesAndKeepsNumbering) {
  const RunConfig c = parse(
      "model llama &\n"
      "   preset tiny &   # comments may follow the ampersand\n"
      "   num_hidden_layers 2\n"
      "max_steps &\n"
      "10\n"
      "batch micro 2 seq_len 7\n");
  EXPECT_EQ(c.model.preset, "tiny");
  ASSERT_EQ(c.model.overrides.size(), 1u);
  EXPECT_EQ(c.model.where.line, 1);
  EXPECT_EQ(c.max_steps, 10);
  EXPECT_EQ(c.batch.seq_len, 7);
  ASSERT_EQ(c.resolved_lines.size(), 3u);
  EXPECT_EQ(c.resolved_lines[1], "tiny.in:4: max_steps 10");
  EXPECT_EQ(c.resolved_lines[2], "tiny.in:6: batch micro 2 seq_len 7");
  // An error after a continuation points at the right physical line.
  expect_error("model llama &\n preset tiny\nmax_steps 1\nseed x\n", 4, {"'seed'", "'x'"});
}

TEST(DeckGrammar, CrLfAndByteOrderMark) {
  const RunConfig c = parse("\xEF\xBB\xBFmodel llama\r\nmax_steps 3\r\n");
  EXPECT_EQ(c.model.name, "llama");
  EXPECT_EQ(c.max_steps, 3);
}

TEST(DeckGrammar, QuotesAndSubstitution) {
  const RunConfig c = parse(
      "variable who world\n"
      "model llama greeting \"hello ${who}\" literal 'hello ${who}' glued a\"b c\"'d e' "
      "empty \"\"\n"
      "max_steps 1\n");
  ASSERT_EQ(c.model.overrides.size(), 4u);
  EXPECT_EQ(c.model.overrides[0].second, "hello world");
  EXPECT_EQ(c.model.overrides[1].second, "hello ${who}");
  EXPECT_EQ(c.model.overrides[2].second, "ab cd e");
  EXPECT_EQ(c.model.overrides[3].second, "");
  // The echo quotes words so that it reads back as the same words.
  EXPECT_EQ(c.resolved_lines[1],
            "tiny.in:2: model llama greeting 'hello world' literal 'hello ${who}' glued 'ab cd e' "
            "empty ''");
}

TEST(DeckGrammar, UnquotedValueSplitsIntoWordsButIsNotReparsed) {
  const RunConfig c = parse(
      "variable opts \"lr 1e-3   eps 1e-7\"\n"
      "variable odd \"'#x\"\n"
      "optimizer adamw ${opts}\n"
      "model llama tag ${odd}\n"
      "max_steps 1\n");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-7);
  ASSERT_EQ(c.model.overrides.size(), 1u);
  EXPECT_EQ(c.model.overrides[0].second, "'#x");
}

TEST(DeckGrammar, VariablePriorityCommandLineDeckEnvironment) {
  ::setenv("FTRAIN_DECK_TEST_STEPS", "7", 1);
  ::setenv("FTRAIN_DECK_TEST_PRESET", "from_env", 1);
  RunConfig c = parse("model llama preset ${FTRAIN_DECK_TEST_PRESET}\nmax_steps ${FTRAIN_DECK_TEST_STEPS}\n");
  EXPECT_EQ(c.max_steps, 7);
  EXPECT_EQ(c.model.preset, "from_env");

  // The deck beats the environment; the command line beats both, and a deck
  // definition of a command-line variable is not a duplicate.
  const std::string deck =
      "variable FTRAIN_DECK_TEST_STEPS 8\n"
      "variable FTRAIN_DECK_TEST_STEPS 9\n"
      "model llama preset ${FTRAIN_DECK_TEST_PRESET}\n"
      "max_steps ${FTRAIN_DECK_TEST_STEPS}\n";
  c = parse(deck, {{"FTRAIN_DECK_TEST_STEPS", "11"}, {"FTRAIN_DECK_TEST_PRESET", "cli"}});
  EXPECT_EQ(c.max_steps, 11);
  EXPECT_EQ(c.model.preset, "cli");
  EXPECT_EQ(c.resolved_lines[0], "tiny.in:1: variable FTRAIN_DECK_TEST_STEPS 8  # overridden by -var FTRAIN_DECK_TEST_STEPS");
  c = parse("variable FTRAIN_DECK_TEST_STEPS 8\nmodel llama\nmax_steps ${FTRAIN_DECK_TEST_STEPS}\n");
  EXPECT_EQ(c.max_steps, 8);
  // An environment value must not smuggle a line break into a one-line error or echo.
  ::setenv("FTRAIN_DECK_TEST_PRESET", "a\nb", 1);
  expect_error("model llama preset ${FTRAIN_DECK_TEST_PRESET}\n", 1,
               {"environment variable 'FTRAIN_DECK_TEST_PRESET'", "control character"});
  ::unsetenv("FTRAIN_DECK_TEST_STEPS");
  ::unsetenv("FTRAIN_DECK_TEST_PRESET");
}

// A -var that no ${NAME} reads changes nothing: warned, with a suggestion,
// while one the deck reads (directly or through its own definition) is not.
TEST(DeckGrammar, UnreadCommandLineVariableIsWarned) {
  const std::string deck = "variable data_dir var_warning_data/x\nvariable unused 1\nmodel llama preset tiny\n"
                           "data tokens ${data_dir}\nmax_steps 10\n";
  fs::create_directories("var_warning_data");
  std::ofstream("var_warning_data/x").put('x');
  RunConfig c = parse(deck, {{"data_dir", "var_warning_data/x"}});
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
  c = parse(deck, {{"data_dri", "var_warning_data/x"}, {"unused", "2"}});
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_EQ(c.warnings[0],
            "command line: -var data_dri is never read by the deck (no ${data_dri} in it), so it changes nothing "
            "(did you mean 'data_dir'?)");
  EXPECT_NE(c.warnings[1].find("-var unused is never read"), std::string::npos) << c.warnings[1];
  fs::remove_all("var_warning_data");
}

TEST(DeckGrammar, VariablesSeeOnlyEarlierDefinitions) {
  const RunConfig c = parse("variable a 2\nvariable b ${a}0\nmodel llama\nmax_steps ${b}\n");
  EXPECT_EQ(c.max_steps, 20);
  expect_error("max_steps ${later_var}\nvariable later_var 3\nmodel llama\n", 1,
               {"undefined variable '${later_var}'"});
}

// ---- include ------------------------------------------------------------------------

TEST(DeckInclude, RelativeToIncludingFileAndSharesVariables) {
  TempDir dir;
  dir.write("conf/common.in", "variable steps 12\ninclude parts/model.in\n");
  dir.write("conf/parts/model.in", "model llama preset ${preset}\n");
  const std::string top = dir.write("top.in", "variable preset tiny\ninclude conf/common.in\nmax_steps ${steps}\n");
  const RunConfig c = parse_deck_file(top, {});
  EXPECT_EQ(c.model.preset, "tiny");
  EXPECT_EQ(c.max_steps, 12);
  EXPECT_EQ(c.deck_path, top);
  const std::string model_file = (dir.path() / "conf/parts/model.in").string();
  EXPECT_EQ(c.model.where.file, model_file);
  EXPECT_EQ(c.model.where.line, 1);
  ASSERT_EQ(c.resolved_lines.size(), 6u);
  EXPECT_EQ(c.resolved_lines[4], model_file + ":1: model llama preset tiny");
}

TEST(DeckInclude, ErrorsInsideIncludedFileNameThatFile) {
  TempDir dir;
  dir.write("inner.in", "\n\noptimizer adamw lr abc\n");
  const std::string top = dir.write("top.in", "model llama\ninclude inner.in\nmax_steps 1\n");
  try {
    parse_deck_file(top, {});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir.path() / "inner.in").string() + ":3: 'lr' expects a positive number, got 'abc'");
  }
}

TEST(DeckInclude, LoopIsAnErrorShowingTheChain) {
  TempDir dir;
  const std::string a = dir.write("a.in", "model llama\ninclude b.in\n");
  dir.write("b.in", "include ./a.in\n");
  try {
    parse_deck_file(a, {});
    FAIL() << "no error";
  } catch (const UserError& e) {
    const std::string a_path = (dir.path() / "a.in").string();
    const std::string b_path = (dir.path() / "b.in").string();
    EXPECT_EQ(std::string(e.what()),
              b_path + ":1: include loop: " + a_path + " -> " + b_path + " -> " + a_path);
  }
  // A file including itself.
  const std::string self = dir.write("self.in", "include self.in\n");
  try {
    parse_deck_file(self, {});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("include loop"), std::string::npos) << e.what();
  }
}

TEST(DeckInclude, MissingOrUnreadableIncludeFile) {
  TempDir dir;
  const std::string top = dir.write("top.in", "model llama\ninclude nope.in\n");
  try {
    parse_deck_file(top, {});
    FAIL() << "no error";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(top + ":2: cannot read include file '", 0), 0u) << message;
    EXPECT_NE(message.find("nope.in': no such file"), std::string::npos) << message;
  }
  // A directory is not a deck; parse_deck_string resolves from the cwd.
  const std::string message = error_of("include " + dir.path().string() + "\n");
  EXPECT_EQ(message.rfind("tiny.in:1: cannot read include file", 0), 0u) << message;
  EXPECT_NE(message.find("not a regular file"), std::string::npos) << message;
}

TEST(DeckInclude, StringDeckIncludesAbsolutePath) {
  TempDir dir;
  const std::string part = dir.write("part.in", "max_steps 4\n");
  const RunConfig c = parse("model llama\ninclude " + part + "\n");
  EXPECT_EQ(c.max_steps, 4);
}

TEST(DeckFile, MissingTopLevelDeck) {
  try {
    parse_deck_file("/nonexistent/dir/deck.in", {});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/dir/deck.in: cannot read input deck: no such file");
  }
}

// ---- errors -----------------------------------------------------------------------------

TEST(DeckErrors, UnknownCommandWithSuggestion) {
  expect_error(kRequired + "optimiser adamw\n", 3,
               {"unknown command 'optimiser' (did you mean 'optimizer'?)"});
  expect_error("modle llama\n", 1, {"unknown command 'modle' (did you mean 'model'?)"});
  const std::string far = error_of("frobnicate 1\n");
  EXPECT_EQ(far, "tiny.in:1: unknown command 'frobnicate'");
}

TEST(DeckErrors, KeywordTypoWithSuggestion) {
  expect_error(kRequired + "optimizer adamw lr 1e-3 wieght_decay 0.1\n", 3,
               {"unknown keyword 'wieght_decay' for 'optimizer adamw'",
                "(did you mean 'weight_decay'?)", "expected one of: lr, beta1, beta2, eps, weight_decay"});
  expect_error(kRequired + "batch micro 2 seqlen 5\n", 3, {"'seqlen'", "did you mean 'seq_len'?"});
  expect_error(kRequired + "fsdp full_shard backward_prefetch backward_pree\n", 3,
               {"'backward_prefetch' expects one of backward_pre|backward_post|none",
                "got 'backward_pree' (did you mean 'backward_pre'?)"});
}

TEST(DeckErrors, EnumeratedValueTypoWithSuggestion) {
  expect_error(kRequired + "fsdp FULL_SHARD\n", 3,
               {"'fsdp' expects one of full_shard|shard_grad_op|no_shard|hybrid_shard",
                "got 'FULL_SHARD' (did you mean 'full_shard'?)"});
  expect_error(kRequired + "precision bf61\n", 3, {"'precision'", "(did you mean 'bf16'?)"});
  expect_error(kRequired + "schedule cosin\n", 3, {"(did you mean 'cosine'?)"});
  expect_error(kRequired + "init randon\n", 3,
               {"'init' expects random|safetensors|hdf5|adapter, got 'randon' (did you mean 'random'?)"});
  TempDir dir;
  const std::string train = dir.write("train.bin", "x");
  expect_error(kRequired + "data tokens " + train + " packing no\n", 3,
               {"'packing' expects on or off, got 'no' (did you mean 'on'?)"});
  expect_error(kRequired + "log every 2 rank_files of\n", 3,
               {"'rank_files' expects on or off, got 'of' (did you mean 'on'?)"});
  expect_error(kRequired + "activation_checkpointing evrey 2\n", 3,
               {"(did you mean 'every'?)"});
}

TEST(DeckErrors, BadNumbers) {
  expect_error(kRequired + "optimizer adamw lr abc\n", 3,
               {"'lr' expects a positive number, got 'abc'"});
  EXPECT_EQ(error_of(kRequired + "optimizer adamw lr abc\n"),
            "tiny.in:3: 'lr' expects a positive number, got 'abc'");
  expect_error(kRequired + "optimizer adamw lr 0\n", 3, {"'lr' expects a positive number, got '0'"});
  expect_error(kRequired + "optimizer adamw lr -1e-3\n", 3, {"got '-1e-3'"});
  expect_error(kRequired + "optimizer adamw lr inf\n", 3, {"got 'inf'"});
  expect_error(kRequired + "optimizer adamw lr nan\n", 3, {"got 'nan'"});
  expect_error(kRequired + "optimizer adamw lr 1e-3x\n", 3, {"got '1e-3x'"});
  expect_error(kRequired + "optimizer adamw lr 1e999\n", 3, {"(out of range)"});
  expect_error(kRequired + "optimizer adamw beta1 1\n", 3, {"'beta1' expects a number in [0, 1)"});
  expect_error(kRequired + "optimizer adamw beta2 -0.1\n", 3, {"'beta2' expects a number in [0, 1)"});
  expect_error(kRequired + "optimizer adamw weight_decay -1\n", 3,
               {"'weight_decay' expects a non-negative number"});
  expect_error(kRequired + "schedule cosine warmup_ratio 1\n", 3, {"'warmup_ratio' expects a number in [0, 1)"});
  expect_error("model llama\nmax_steps 1e5\n", 2, {"'max_steps' expects a positive integer, got '1e5'"});
  expect_error("model llama\nmax_steps 0\n", 2, {"'max_steps' expects a positive integer, got '0'"});
  expect_error("model llama\nmax_steps 99999999999999999999\n", 2, {"(out of range)"});
  expect_error(kRequired + "seed -1\n", 3, {"'seed' expects a non-negative integer, got '-1'"});
  expect_error(kRequired + "fsdp full_shard limit_all_gathers 0\n", 3,
               {"'limit_all_gathers' expects a positive integer, got '0'"});
  expect_error(kRequired + "batch micro 2.5\n", 3, {"'micro' expects a positive integer, got '2.5'"});
  expect_error(kRequired + "clip_grad_norm -1\n", 3, {"'clip_grad_norm' expects a non-negative number"});
  expect_error(kRequired + "peak_tflops 0\n", 3, {"'peak_tflops' expects a positive number"});
  expect_error(kRequired + "activation_checkpointing every 0\n", 3,
               {"'activation_checkpointing every' expects a positive integer, got '0'"});
}

// Every missing input path of a deck is named at once, not the first only:
// the parse goes on past one (ftrain --check fixes a deck in one round trip).
TEST(DeckErrors, EveryMissingFileAtOnce) {
  const std::string deck = kRequired + "data tokens /no/such/train.bin\neval tokens /no/such/eval.bin every 2\n"
                                       "init safetensors /no/such/hf\n";
  try {
    parse_deck_string(deck, "tiny.in", {});
    ADD_FAILURE() << "three missing files parsed without an error";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("3 problems:\n", 0), 0u) << message;
    for (const char* line : {"tiny.in:3: file '/no/such/train.bin' given to 'data tokens' does not exist",
                             "tiny.in:4: file '/no/such/eval.bin' given to 'eval tokens' does not exist",
                             "tiny.in:5: file '/no/such/hf' given to 'init safetensors' does not exist"})
      EXPECT_NE(message.find(line), std::string::npos) << "expected '" << line << "' in: " << message;
  }
  // Deferred (what ftrain does): the parse succeeds and hands them over.
  const RunConfig c = parse_deck_string(deck, "tiny.in", {}, MissingPaths::defer);
  ASSERT_EQ(c.missing_paths.size(), 3u);
  EXPECT_EQ(c.missing_paths[2].rfind("tiny.in:5: file '/no/such/hf' given to 'init safetensors'", 0), 0u)
      << c.missing_paths[2];
  EXPECT_TRUE(parse(kRequired).missing_paths.empty());
}

TEST(DeckErrors, MissingFile) {
  expect_error(kRequired + "data tokens /no/such/train.bin\n", 3,
               {"file '/no/such/train.bin' given to 'data tokens' does not exist"});
  expect_error(kRequired + "init safetensors missing.safetensors\n", 3,
               {"'missing.safetensors'", "'init safetensors' does not exist"});
  expect_error(kRequired + "eval tokens /no/val.bin every 5\n", 3, {"'/no/val.bin'"});
}

TEST(DeckErrors, UndefinedAndBadVariables) {
  EXPECT_EQ(error_of("variable data_dirs /x\ndata tokens ${data_dir}/t.bin\n"),
            "tiny.in:2: undefined variable '${data_dir}' (did you mean 'data_dirs'?) (define it "
            "above with 'variable data_dir VALUE', or pass -var data_dir VALUE on the command line)");
  expect_error("model ${1x}\n", 1, {"bad variable reference '${1x}'"});
  expect_error("model ${}\n", 1, {"bad variable reference '${}'"});
  expect_error("model ${abc\n", 1, {"unterminated variable reference '${abc'"});
  expect_error("variable 9lives 1\n", 1, {"'variable' expects a name", "got '9lives'"});
  // $ without a brace is an ordinary character.
  const RunConfig c = parse(kRequired + "run_dir $HOME/x\n");
  EXPECT_EQ(c.run_dir, "$HOME/x");
}

TEST(DeckErrors, DuplicateVariable) {
  expect_error("variable x 1\nmodel llama\nvariable x 2\n", 3,
               {"variable 'x' already defined at tiny.in:1", "-var x VALUE"});
}

TEST(DeckErrors, CommandLineVariables) {
  try {
    parse(kRequired, {{"bad name", "1"}});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("command line: -var 'bad name'", 0), 0u) << e.what();
  }
  // A later -var of the same name wins.
  EXPECT_EQ(parse("model llama\nmax_steps ${n}\n", {{"n", "1"}, {"n", "2"}}).max_steps, 2);
}

TEST(DeckErrors, UnterminatedQuote) {
  expect_error(kRequired + "run_dir 'abc\n", 3, {"unterminated quote: ' opened on this line"});
  expect_error(kRequired + "run_dir \"abc\n", 3, {"unterminated quote: \""});
  // A quote may span a continuation.
  const RunConfig c = parse(kRequired + "run_dir 'a &\nb'\n");
  EXPECT_EQ(c.run_dir, "a  b");
}

TEST(DeckErrors, MissingRequiredCommand) {
  EXPECT_EQ(error_of("model llama\n# nothing else\n"),
            "tiny.in:2: missing required command 'max_steps' in deck 'tiny.in' (e.g. 'max_steps 1000')");
  expect_error("max_steps 3\n", 1, {"missing required command 'model'"});
  expect_error("", 1, {"missing required command 'model'"});
}

TEST(DeckErrors, ArgumentShapeErrors) {
  expect_error("model llama\nmax_steps\n", 2, {"'max_steps' expects N (a positive integer), got nothing"});
  expect_error("model llama\nmax_steps 3 4\n", 2,
               {"unexpected word '4' after '3': 'max_steps' takes no further arguments"});
  expect_error(kRequired + "optimizer adamw lr\n", 3, {"'lr' expects a positive number, got nothing"});
  expect_error(kRequired + "optimizer adamw lr 1 lr 2\n", 3, {"keyword 'lr' given twice"});
  expect_error(kRequired + "optimizer\n", 3, {"'optimizer' expects adamw, got nothing"});
  expect_error(kRequired + "optimizer sgd\n", 3, {"'optimizer' expects adamw, got 'sgd'"});
  expect_error(kRequired + "batch seq_len 4\n", 3, {"'batch' needs 'micro N' (a positive integer)"});
  expect_error(kRequired + "eval tokens /\n", 3, {"'eval tokens' needs 'every N'"});
  expect_error(kRequired + "cross_entropy\n", 3, {"'cross_entropy' needs 'vocab_chunk N'"});
  expect_error("model llama n_layers\nmax_steps 1\n", 1, {"'n_layers' expects a value, got nothing"});
  expect_error("model llama a 1 a 2\n", 1, {"keyword 'a' given twice"});
  expect_error("model llama 1x 2\n", 1, {"KEY a name", "got '1x'"});
  expect_error("model llama\nmodel vit\n", 2, {"'model' was already given at tiny.in:1"});
  expect_error(kRequired + "run_dir ''\n", 3, {"'run_dir' expects a non-empty path, got ''"});
}

TEST(DeckErrors, CrossCommandChecks) {
  expect_error(kRequired + "schedule cosine warmup_steps 1 warmup_ratio 0.1\n", 3,
               {"'schedule' takes 'warmup_steps' or 'warmup_ratio', not both"});
  expect_error(kRequired + "optimizer adamw lr 1e-4\nschedule cosine min_lr 1e-3\n", 4,
               {"'min_lr' 0.001 is larger than the optimizer's lr 1e-4"});
  expect_error(kRequired + "schedule linear warmup_steps 11\n", 3,
               {"'warmup_steps' 11 is more than max_steps 10 (at tiny.in:2)"});
}

TEST(DeckErrors, ControlCharactersAndDanglingContinuation) {
  expect_error(kRequired + "run_dir a\x01" "b\n", 3, {"unexpected control character 0x01"});
  expect_error(std::string("model llama\0x\n", 14), 1, {"unexpected control character 0x00"});
  expect_error(kRequired + "run_dir x &\n", 3, {"ends with '&' but no line follows"});
}

TEST(DeckErrors, FileNameInEveryMessage) {
  const std::string message = error_of("model llama\nseed x\n", {}, "recipes/llama.in");
  EXPECT_EQ(message, "recipes/llama.in:2: 'seed' expects a non-negative integer, got 'x'");
}

TEST(DeckErrors, EchoedWordsAreEscapedAndShortened) {
  EXPECT_EQ(deck::quote_word("a\tb\x7f"), "'a\\x09b\\x7f'");
  const std::string long_word(200, 'z');
  const std::string message = error_of("model llama\nseed " + long_word + "\n");
  EXPECT_LT(message.size(), 200u);
  EXPECT_NE(message.find("zzz...'"), std::string::npos);
}

// ---- suggestions -------------------------------------------------------------------------

TEST(DeckSuggest, NumbersAreFormattedShortestAndReadBack) {
  EXPECT_EQ(deck::format_number(1e-4), "1e-4");
  EXPECT_EQ(deck::format_number(3e-4), "3e-4");
  EXPECT_EQ(deck::format_number(0.02), "0.02");
  EXPECT_EQ(deck::format_number(1e-8), "1e-8");
  EXPECT_EQ(deck::format_number(1e20), "1e+20");
  EXPECT_EQ(deck::format_number(0.95), "0.95");
}

TEST(DeckSuggest, EditDistance) {
  EXPECT_EQ(deck::edit_distance("optimiser", "optimizer"), 1u);
  EXPECT_EQ(deck::edit_distance("ab", "ba"), 1u);  // transposition is one edit
  EXPECT_EQ(deck::edit_distance("", "abc"), 3u);
  EXPECT_EQ(deck::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(deck::did_you_mean("lrr", {"lr", "eps"}), " (did you mean 'lr'?)");
  EXPECT_EQ(deck::did_you_mean("xyz", {"lr", "eps"}), "");
  EXPECT_EQ(deck::did_you_mean("NO_SHARD", {"no_shard", "full_shard"}), " (did you mean 'no_shard'?)");
}

// ---- reference ---------------------------------------------------------------------------

TEST(DeckReference, MarkdownCoversEveryCommandKeywordAndDefault) {
  const std::string md = deck_reference_markdown();
  for (const deck::Command& command : deck::command_table()) {
    EXPECT_NE(md.find("### " + std::string(command.name) + "\n"), std::string::npos) << command.name;
    for (const deck::Form& form : command.forms) {
      EXPECT_NE(md.find("    " + deck::synopsis(command, form) + "\n"), std::string::npos);
      for (const deck::Param& keyword : form.keywords) {
        EXPECT_NE(md.find("| `" + std::string(keyword.name) + "` |"), std::string::npos)
            << command.name << " " << keyword.name;
      }
    }
    // The example in the docs must itself be a valid line (paths aside).
    if (command.name != "include" && command.name != "data" && command.name != "eval") {
      std::string deck = "variable data_dir d\nvariable name n\n";
      if (command.name != "model") deck += "model llama\n";
      if (command.name != "max_steps") deck += "max_steps 1000\n";
      if (command.name == "variable") deck = "model llama\nmax_steps 1\n";
      EXPECT_NO_THROW(parse(deck + std::string(command.example) + "\n")) << command.example;
    }
  }
  const RunConfig defaults;
  EXPECT_NE(md.find("| `lr` | a positive number | " + deck::format_number(defaults.optimizer.lr)),
            std::string::npos);
  EXPECT_NE(md.find("full_shard = FULL_SHARD"), std::string::npos);
  EXPECT_NE(md.find("backward_pre = BACKWARD_PRE"), std::string::npos);
  EXPECT_NE(md.find("TRANSFORMER_BASED_WRAP"), std::string::npos);
  EXPECT_NE(md.find("`per_device_train_batch_size`"), std::string::npos);
  EXPECT_NE(md.find("Accelerate `mixed_precision`"), std::string::npos);
  EXPECT_NE(md.find("    batch micro N [accumulate N] [seq_len N]\n"), std::string::npos);
}

// ---- robustness -----------------------------------------------------------------------------

// A cheap in-test fuzz (the libFuzzer target tests/fuzz/fuzz_deck.cpp goes
// much further): random mutations of a valid deck only ever raise
// ftrain::Error, never another exception.
TEST(DeckRobustness, MutatedDecksRaiseOnlyUserErrors) {
  const std::string base =
      "variable v 3 # c\nmodel llama preset 'tiny' n \"${v}\" &\n k v\nmax_steps ${v}\n"
      "optimizer adamw lr 1e-3\nfsdp full_shard limit_all_gathers 2\nschedule cosine\n";
  const std::string alphabet = " \t\n#&'\"${}0123456789.-+eabcdxyz_";
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 1: if (at < text.size()) text.erase(at, 1); break;
        default: if (at < text.size()) text[at] = static_cast<char>(rng() % 256); break;
      }
    }
    try {
      parse(text);
      ++parsed;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(parsed, 0);
}

// LoRA (issue 16): PEFT's names and defaults; repeatable `lora` lines; `init
// adapter` beside the base's init; errors name the line.
TEST(DeckLora, CommandsFillTheLoraSection) {
  const RunConfig plain = parse(kRequired);
  EXPECT_FALSE(plain.lora.enabled);
  EXPECT_EQ(plain.lora.rank, 8);  // PEFT LoraConfig defaults
  EXPECT_EQ(plain.lora.alpha, 8.0);
  EXPECT_EQ(plain.lora.dropout, 0.0);
  EXPECT_EQ(deck::lora_targets_text(plain.lora), "q_proj,v_proj");
  TempDir dir;
  const std::string adapter = dir.write("adapter/adapter_config.json", "{}");
  const RunConfig c = parse(kRequired + "init random std 0.02\n"
                                        "lora rank 16 alpha 32 dropout 0.05 targets q_proj,k_proj,v_proj,o_proj\n"
                                        "lora init gaussian\n"
                                        "rslora on\n"
                                        "init adapter " + fs::path(adapter).parent_path().string() + "\n"
                                        "save_adapter out/adapter\n"
                                        "merge_adapter on\n");
  EXPECT_TRUE(c.lora.enabled);
  EXPECT_EQ(c.lora.rank, 16);
  EXPECT_EQ(c.lora.alpha, 32.0);
  EXPECT_EQ(c.lora.dropout, 0.05);
  EXPECT_EQ(deck::lora_targets_text(c.lora), "q_proj,k_proj,v_proj,o_proj");
  EXPECT_EQ(c.lora.init, deck::LoraInit::gaussian);
  EXPECT_TRUE(c.lora.rslora);
  EXPECT_EQ(c.init.kind, deck::InitKind::random) << "init adapter must not replace the base's init";
  EXPECT_EQ(c.lora.adapter_path, fs::path(adapter).parent_path().string());
  EXPECT_EQ(c.lora.save_adapter_path, "out/adapter");
  EXPECT_TRUE(c.lora.merge);
  EXPECT_EQ(c.lora.where.line, 4);
  EXPECT_TRUE(parse(kRequired + "lora targets all-linear\n").lora.all_linear);
}

TEST(DeckLora, ErrorsNameTheLine) {
  expect_error(kRequired + "lora targets q_proj,,v_proj\n", 3, {"'lora' targets 'q_proj,,v_proj'", "all-linear"});
  expect_error(kRequired + "lora targets all-linear,q_proj\n", 3, {"'lora' targets"});
  expect_error(kRequired + "lora dropout 1.5\n", 3, {"dropout"});
  expect_error(kRequired + "lora rank 0\n", 3, {"rank"});
  TempDir dir;
  const std::string a = fs::path(dir.write("a/adapter_config.json", "{}")).parent_path().string();
  expect_error(kRequired + "init adapter " + a + "\ninit adapter " + a + "\n", 4,
               {"'init adapter' was already given at tiny.in:3"});
  expect_error(kRequired + "init random\ninit hdf5 " + a + "/adapter_config.json\n", 4, {"'init' was already given"});
}
