// A model's own chat template: the Jinja `chat_template` of its Hugging Face
// tokenizer_config.json, rendered as transformers' apply_chat_template
// renders it (share/doc/data.md, "The model's chat template").
//
// The interpreter covers the Jinja subset that chat templates use, with the
// environment transformers sets up (trim_blocks, lstrip_blocks, a single
// trailing newline of the source dropped):
//   statements  {% if %}/{% elif %}/{% else %}/{% endif %},
//               {% for x in xs %} and {% for k, v in d.items() %} with loop.index0,
//               index, first, last, length, revindex, revindex0, previtem,
//               nextitem; {% break %}, {% continue %}; {% set x = ... %},
//               {% set ns.x = ... %}; {% generation %} (its body; what it writes
//               is what render_model_chat trains);
//               comments; whitespace control {%- -%} {{- -}} {#- -#}
//   expressions strings, integers, floats, true/false/none (either case),
//               lists, {'key': value} dicts, names, x.attr, x['key'], x[i], x[a:b:c], + - * / // % **
//               ~, == != < <= > >=, in / not in, and / or / not,
//               a if c else b, is [not] defined/undefined/none/string/number/
//               integer/boolean/mapping/iterable/sequence/true/false/even/odd
//   calls       raise_exception(msg), namespace(k=v, ...), range(...),
//               strftime_now(format) (the local time, as transformers has it);
//               string methods strip/lstrip/rstrip/upper/lower/title/
//               capitalize/startswith/endswith/split/replace; dict items/keys/
//               values/get
//   filters     trim, length/count, upper, lower, title, capitalize, first,
//               last, string, int, join, default/d, replace, list, reverse,
//               tojson (json.dumps as transformers calls it; a mapping of
//               several keys is refused: the order Python keeps is lost here)
// Scoping follows Jinja: a {% set %} inside a for body does not outlive the
// iteration (use namespace()); an if body shares its enclosing scope.
// Anything else is a UserError naming the template's origin, line and column.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ftrain::data {

class ChatTemplate {
 public:
  // Parses `source`; `origin` names it in messages, e.g.
  // "/models/x/tokenizer_config.json chat_template".
  ChatTemplate(const std::string& source, std::string origin);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The text for the variables of `context` (a JSON object: messages,
  // bos_token, add_generation_prompt, ...). raise_exception(msg) and errors
  // of evaluation are UserErrors naming the origin and the position.
  // `generation`, when given, gets the byte ranges of the output that
  // {% generation %} blocks wrote.
  std::string render(const nlohmann::json& context,
                     std::vector<std::pair<std::size_t, std::size_t>>* generation = nullptr) const;
  bool has_generation_blocks() const { return generation_blocks_; }
  const std::string& origin() const { return origin_; }

  struct Node;

 private:
  std::string origin_;
  bool neighbours_ = false;  // the source names loop.previtem or loop.nextitem
  bool generation_blocks_ = false;
  std::vector<Node> body_;
};

// A chat template and the special tokens apply_chat_template passes with it
// (bos_token, eos_token, unk_token, pad_token: the strings of
// tokenizer_config.json).
struct ModelChatTemplate {
  std::string path;  // the file it came from, for messages
  std::unique_ptr<ChatTemplate> chat_template;
  nlohmann::json special_tokens = nlohmann::json::object();
};

// Reads tokenizer_config.json (its chat_template: a string, or a list of
// {name, template} whose "default" is taken), or a .jinja file (then the
// special tokens come from a tokenizer_config.json beside it, if any).
ModelChatTemplate load_model_chat_template(const std::string& path);

// The chat template of the model a tokenizer belongs to: in the directory
// `tokenizer_path` names or holds the file of, tokenizer_config.json's
// chat_template, else chat_template.jinja. Null when neither has one;
// `looked_in` gets the directory.
std::unique_ptr<ModelChatTemplate> find_model_chat_template(const std::string& tokenizer_path,
                                                            std::string& looked_in);

// A conversation rendered by a model's template, with the byte ranges
// [first, second) of the text that are trained: each assistant turn as the
// template writes it (its content and the end marker that follows, up to the
// next turn), found by rendering prefixes of the conversation; or, for a
// template with {% generation %} blocks, what those blocks write (as
// transformers' return_assistant_tokens_mask).
struct RenderedChat {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> trained;
};

// `messages` is the JSON array of the example; `where` ("FILE:LINE") starts
// every error message. Every assistant message must have a user or system
// message before it, and the last message must be the assistant's.
RenderedChat render_model_chat(const nlohmann::json& messages, const ModelChatTemplate& model, const std::string& where);

}  // namespace ftrain::data
