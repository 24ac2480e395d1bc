// Instruction and chat data to masked token files: the work behind
// `ftrain-prep instruct` (share/doc/data.md, "Instruction data").
//
// Input: JSON lines, one example per non-blank line. A template renders each
// example into pieces of text, each either a prompt piece (read by the model,
// not trained: its loss-mask bits are 0) or a response piece (trained), and
// the end-of-turn eos tokens. The writer appends one trained eos after the
// last piece, so the model learns to stop after its response.
//
// Templates (exact text; "{x}" is field x of the record, "<eos>" the
// tokenizer's eos id, [brackets] mark prompt pieces, the rest is trained):
//
//   fields  [{prompt}]{response}<eos>
//           prompt/response fields named by --prompt-field (default
//           "prompt") and --response-field (default "response"); no text is
//           added, the data carries its own formatting.
//   alpaca  Stanford Alpaca's prompt (github.com/tatsu-lab/stanford_alpaca,
//           train.py PROMPT_DICT), fields instruction, input (optional),
//           output. With a non-empty input:
//             [Below is an instruction that describes a task, paired with an
//              input that provides further context. Write a response that
//              appropriately completes the request.\n\n### Instruction:\n
//              {instruction}\n\n### Input:\n{input}\n\n### Response:]{output}<eos>
//           without one (missing or ""):
//             [Below is an instruction that describes a task. Write a response
//              that appropriately completes the request.\n\n### Instruction:\n
//              {instruction}\n\n### Response:]{output}<eos>
//   zephyr  a list of messages {"role": ..., "content": ...} in the field
//           named by --messages-field (default "messages"), roles system,
//           user and assistant, with Zephyr's role markers; per message:
//             [<|{role}|>\n]{content}<eos>       role assistant
//             [<|{role}|>\n{content}<eos>]       roles system and user
//           The conversation must end with an assistant message (its eos is
//           the writer's). Every assistant turn is trained; eos inside the
//           document is fine (the version 2 document index delimits examples).
//   chat    the same messages, rendered by the model's own chat template
//           (chat_template.hpp: tokenizer_config.json's chat_template, as
//           transformers' apply_chat_template renders it). The whole text is
//           encoded at once as Hugging Face encodes it (special tokens in the
//           text are their ids, no bos added: the template writes its own);
//           a token is trained when any of its bytes lies in an assistant
//           turn (its content and the end marker the template writes after
//           it). A final eos the template wrote is the writer's; a template
//           that ends a turn otherwise (<|eot_id|>, <|im_end|>\n) gets the
//           tokenizer's eos after it, trained.
//
// Tokenization: each piece is encoded on its own and the ids concatenated, so
// the mask falls exactly on piece boundaries (a SentencePiece tokenizer puts
// its word-start marker at the start of each piece, as Meta's Llama chat code
// does by encoding each turn separately). The example starts with a bos
// exactly when `text` puts one before each document: the tokenizer's own
// (Llama 3's tokenizer.json and rank file add <|begin_of_text|>, untrained;
// SentencePiece and bytes add none). With chat, the template decides.
//
// Split and memory as in text_prep.hpp: example N, 2N, ... goes to the eval
// file; one example is held at a time (the mask and document index of the
// output are kept until close, 1/8 byte per token + 8 bytes per example).
//
// Errors are UserErrors naming FILE:LINE and the field; nothing is written.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include "data/chat_template.hpp"
#include "data/text_tokenizer.hpp"

namespace ftrain::data {

enum class InstructionTemplate { fields, alpaca, zephyr, chat };

// "fields", "alpaca", "zephyr", "chat"; false for anything else.
bool parse_instruction_template(std::string_view name, InstructionTemplate& out);

struct InstructionPrepOptions {
  std::string out_path;
  std::string eval_out_path;  // empty: no eval file
  std::int64_t eval_every = 100;
  InstructionTemplate format = InstructionTemplate::alpaca;
  std::string prompt_field = "prompt";      // fields
  std::string response_field = "response";  // fields
  std::string messages_field = "messages";  // zephyr, chat
  std::shared_ptr<const ModelChatTemplate> chat_template;  // chat: the model's
};

// One piece of a rendered example: text, or (eos) the tokenizer's eos id.
struct TemplatePiece {
  std::string text;
  bool eos = false;
  bool trained = false;
};

// The pieces of one example (the JSON object on `json_line`); `where` is
// "FILE:LINE" for error messages. The final eos is not among them (the
// writer appends it).
std::vector<TemplatePiece> render_instruction(std::string_view json_line, const InstructionPrepOptions& options,
                                              const std::string& where);

// Encodes pieces into ids and per-id trained flags (1 = trained).
void encode_instruction(const std::vector<TemplatePiece>& pieces, const TextTokenizer& tokenizer,
                        std::vector<std::uint32_t>& ids, std::vector<std::uint8_t>& trained);

// Encodes a conversation the model's template rendered: ids and trained
// flags, without the final eos (the writer's).
void encode_rendered_chat(const RenderedChat& chat, const TextTokenizer& tokenizer, std::vector<std::uint32_t>& ids,
                          std::vector<std::uint8_t>& trained);

// One example (the JSON object on `json_line`) in any template, encoded.
void encode_example(std::string_view json_line, const InstructionPrepOptions& options, const TextTokenizer& tokenizer,
                    const std::string& where, std::vector<std::uint32_t>& ids, std::vector<std::uint8_t>& trained);

struct InstructionPrepStats {
  std::int64_t examples = 0;        // written, train + eval
  std::int64_t tokens = 0;          // written, final eos included
  std::int64_t trained_tokens = 0;  // of those, with mask bit 1
  std::int64_t longest_example = 0; // tokens, eos included: packing off needs seq_len + 1 >= this
  std::int64_t train_examples = 0;
  std::int64_t eval_examples = 0;
};

InstructionPrepStats prepare_instructions(const std::vector<std::string>& inputs, const TextTokenizer& tokenizer,
                                          const InstructionPrepOptions& options);

}  // namespace ftrain::data
