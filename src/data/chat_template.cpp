// The Jinja subset of chat templates (see chat_template.hpp).
#include "data/chat_template.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "base/error.hpp"

namespace ftrain::data {

using nlohmann::json;

namespace {

// Jinja's Undefined: a missing variable, key or attribute.
json undefined() { return json(json::value_t::discarded); }
bool is_undefined(const json& v) { return v.is_discarded(); }

struct Position {
  int line = 1;
  int column = 1;
};

struct Expr {
  enum Kind { literal, name, attr, item, slice, call, filter, test, unary, binary, cond, list, dict } kind = literal;
  std::string text;  // name, attribute, operator, filter or test name
  json value;        // literal
  bool negated = false;  // test: `is not`
  std::vector<std::unique_ptr<Expr>> args;  // operands; calls: callee first
  std::vector<std::string> kwarg_names;     // call: names of the trailing keyword arguments
  Position at;
};
using ExprPtr = std::unique_ptr<Expr>;

}  // namespace

struct ChatTemplate::Node {
  enum Kind { text, output, if_, for_, set, break_, continue_, block } kind = text;
  std::string content;                 // text
  std::vector<ExprPtr> exprs;          // output: [value]; if: conditions; for: [iterable]; set: [value]
  std::vector<std::vector<Node>> bodies;  // if: one per condition (+ else); for/block: [body]
  std::vector<std::string> targets;    // for: loop variables; set: [name] or [name, attribute]
  Position at;
};

namespace {

using Node = ChatTemplate::Node;

// ---------------------------------------------------------------- lexing ---

struct Token {
  enum Kind { name, string, integer, number, op, end } kind = end;
  std::string text;
  json value;
  Position at;
};

[[noreturn]] void fail_at(const std::string& origin, Position at, const std::string& what) {
  FT_USER_ERROR() << origin << ": line " << at.line << ", column " << at.column << ": " << what;
}

Position advance(Position p, std::string_view text) {
  for (const char c : text) {
    if (c == '\n') {
      ++p.line;
      p.column = 1;
    } else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
      ++p.column;
    }
  }
  return p;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The tokens of one tag's inside, `start` being where that text begins.
std::vector<Token> lex_expression(std::string_view s, Position start, const std::string& origin) {
  static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                               "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
  std::vector<Token> out;
  std::size_t i = 0;
  while (true) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    Token t;
    t.at = advance(start, s.substr(0, i));
    if (i >= s.size()) {
      out.push_back(t);
      return out;
    }
    const char c = s[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      t.kind = Token::name;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        t.kind = Token::number;
        t.value = std::stod(std::string(s.substr(i, j - i)));
      } else {
        t.kind = Token::integer;
        t.value = std::stoll(std::string(s.substr(i, j - i)));
      }
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string value;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          value += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case '\\': value += '\\'; break;
          case '\'': value += '\''; break;
          case '"': value += '"'; break;
          case 'u':
          case 'x': {
            const std::size_t digits = e == 'u' ? 4 : 2;
            if (j + digits >= s.size())
              fail_at(origin, advance(start, s.substr(0, j)), "incomplete \\" + std::string(1, e) + " escape");
            append_utf8(value, static_cast<std::uint32_t>(std::stoul(std::string(s.substr(j + 1, digits)), nullptr, 16)));
            j += digits;
            break;
          }
          default: value += '\\'; value += e;  // Python keeps unknown escapes
        }
      }
      if (j >= s.size()) fail_at(origin, t.at, "unterminated string");
      t.kind = Token::string;
      t.value = value;
      t.text = std::string(s.substr(i, j + 1 - i));
      i = j + 1;
    } else {
      std::string op;
      for (const char* candidate : kOps)
        if (s.substr(i).rfind(candidate, 0) == 0) {
          op = candidate;
          break;
        }
      if (op.empty()) fail_at(origin, t.at, std::string("unexpected character '") + c + "'");
      t.kind = Token::op;
      t.text = op;
      i += op.size();
    }
    out.push_back(std::move(t));
  }
}

// ---------------------------------------------------- expression parsing ---

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, const std::string& origin) : tokens_(std::move(tokens)), origin_(origin) {}

  const Token& peek(std::size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  bool at_end() const { return peek().kind == Token::end; }
  bool is_op(const char* op, std::size_t ahead = 0) const { return peek(ahead).kind == Token::op && peek(ahead).text == op; }
  bool is_name(const char* n, std::size_t ahead = 0) const { return peek(ahead).kind == Token::name && peek(ahead).text == n; }
  Token take() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& what) const { fail_at(origin_, peek().at, what); }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', found " + describe(peek()));
    ++pos_;
  }
  std::string expect_name() {
    if (peek().kind != Token::name) fail("expected a name, found " + describe(peek()));
    return take().text;
  }
  void expect_end(const std::string& tag) {
    if (!at_end()) fail("unexpected " + describe(peek()) + " in " + tag);
  }
  static std::string describe(const Token& t) { return t.kind == Token::end ? "the end of the tag" : "'" + t.text + "'"; }

  ExprPtr expression() {
    ExprPtr value = or_expr();
    if (!is_name("if")) return value;
    const Position at = take().at;
    auto node = make(Expr::cond, at);
    node->args.push_back(or_expr());
    node->args.push_back(std::move(value));
    if (is_name("else")) {
      ++pos_;
      node->args.push_back(expression());
    }
    return node;
  }

 private:
  ExprPtr make(Expr::Kind kind, Position at, std::string text = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->at = at;
    e->text = std::move(text);
    return e;
  }
  ExprPtr binary(std::string op, Position at, ExprPtr l, ExprPtr r) {
    auto e = make(Expr::binary, at, std::move(op));
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }
  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    while (is_name("or")) {
      const Position at = take().at;
      l = binary("or", at, std::move(l), and_expr());
    }
    return l;
  }
  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    while (is_name("and")) {
      const Position at = take().at;
      l = binary("and", at, std::move(l), not_expr());
    }
    return l;
  }
  ExprPtr not_expr() {
    if (!is_name("not")) return compare();
    const Position at = take().at;
    auto e = make(Expr::unary, at, "not");
    e->args.push_back(not_expr());
    return e;
  }
  ExprPtr compare() {
    ExprPtr l = math1();
    while (true) {
      const Position at = peek().at;
      std::string op;
      if (peek().kind == Token::op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                       peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = take().text;
      } else if (is_name("in")) {
        ++pos_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return l;
      }
      l = binary(op, at, std::move(l), math1());
    }
  }
  ExprPtr math1() {
    ExprPtr l = concat();
    while (is_op("+") || is_op("-")) {
      const Token t = take();
      l = binary(t.text, t.at, std::move(l), concat());
    }
    return l;
  }
  ExprPtr concat() {
    ExprPtr l = math2();
    while (is_op("~")) {
      const Token t = take();
      l = binary("~", t.at, std::move(l), math2());
    }
    return l;
  }
  ExprPtr math2() {
    ExprPtr l = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = take();
      l = binary(t.text, t.at, std::move(l), power());
    }
    return l;
  }
  ExprPtr power() {
    ExprPtr l = unary();
    while (is_op("**")) {
      const Token t = take();
      l = binary("**", t.at, std::move(l), unary());
    }
    return l;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      const Token t = take();
      auto e = make(Expr::unary, t.at, t.text);
      e->args.push_back(unary());
      return e;
    }
    return filters(postfix(primary()));
  }
  ExprPtr primary() {
    const Token t = take();
    if (t.kind == Token::string) {
      auto e = make(Expr::literal, t.at);
      std::string joined = t.value.get<std::string>();
      while (peek().kind == Token::string) joined += take().value.get<std::string>();  // adjacent literals join
      e->value = joined;
      return e;
    }
    if (t.kind == Token::integer || t.kind == Token::number) {
      auto e = make(Expr::literal, t.at);
      e->value = t.value;
      return e;
    }
    if (t.kind == Token::name) {
      static const std::map<std::string, json> kConstants{{"true", true},  {"True", true},  {"false", false},
                                                          {"False", false}, {"none", nullptr}, {"None", nullptr}};
      if (const auto it = kConstants.find(t.text); it != kConstants.end()) {
        auto e = make(Expr::literal, t.at);
        e->value = it->second;
        return e;
      }
      return make(Expr::name, t.at, t.text);
    }
    if (t.kind == Token::op && t.text == "(") {
      ExprPtr inner = expression();
      if (is_op(",")) fail("tuples are not supported");
      expect_op(")");
      return inner;
    }
    if (t.kind == Token::op && t.text == "[") {
      auto e = make(Expr::list, t.at);
      while (!is_op("]")) {
        e->args.push_back(expression());
        if (!is_op(",")) break;
        ++pos_;
      }
      expect_op("]");
      return e;
    }
    if (t.kind == Token::op && t.text == "{") {  // args: key, value, key, value, ...
      auto e = make(Expr::dict, t.at);
      while (!is_op("}")) {
        e->args.push_back(expression());
        expect_op(":");
        e->args.push_back(expression());
        if (!is_op(",")) break;
        ++pos_;
      }
      expect_op("}");
      return e;
    }
    fail_at(origin_, t.at, "expected a value, found " + describe(t));
  }
  void call_arguments(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Token::name && is_op("=", 1)) {
        call.kwarg_names.push_back(take().text);
        ++pos_;
      } else if (!call.kwarg_names.empty()) {
        fail("a positional argument after a keyword argument");
      }
      call.args.push_back(expression());
      if (!is_op(",")) break;
      ++pos_;
    }
    expect_op(")");
  }
  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Position at = take().at;
        auto a = make(Expr::attr, at, expect_name());
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        const Position at = take().at;
        ExprPtr index;
        if (!is_op(":")) index = expression();
        if (is_op(":")) {
          auto s = make(Expr::slice, at);
          s->args.push_back(std::move(e));
          s->args.push_back(std::move(index));  // may be null: from the start
          for (int part = 0; part < 2 && is_op(":"); ++part) {
            ++pos_;
            s->args.push_back(is_op(":") || is_op("]") ? nullptr : expression());
          }
          e = std::move(s);
        } else {
          auto a = make(Expr::item, at);
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(index));
          e = std::move(a);
        }
        expect_op("]");
      } else if (is_op("(")) {
        auto c = make(Expr::call, peek().at);
        c->args.push_back(std::move(e));
        call_arguments(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const Position at = take().at;
        auto f = make(Expr::filter, at, expect_name());
        f->args.push_back(std::move(e));
        if (is_op("(")) call_arguments(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        const Position at = take().at;
        auto t = make(Expr::test, at);
        if (is_name("not")) {
          ++pos_;
          t->negated = true;
        }
        t->text = expect_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          call_arguments(*t);
        } else if (peek().kind == Token::string || peek().kind == Token::integer || peek().kind == Token::number) {
          t->args.push_back(primary());  // `is divisibleby 3`, `is equalto 'x'`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
  const std::string& origin_;
};

// ------------------------------------------------------ template parsing ---

struct Tag {
  enum Kind { text, output, statement, comment } kind = text;
  std::string content;
  Position at;       // where the content starts
  bool strip_before = false;  // {%- : the text before loses its trailing whitespace
  bool strip_after = false;   // -%}
  bool keep_before = false;   // {%+ : no lstrip_blocks
  bool keep_after = false;    // +%} : no trim_blocks
};

std::vector<Tag> split_tags(std::string source, const std::string& origin) {
  if (!source.empty() && source.back() == '\n') {  // keep_trailing_newline=False
    source.pop_back();
    if (!source.empty() && source.back() == '\r') source.pop_back();
  }
  std::vector<Tag> tags;
  std::size_t i = 0;
  Position pos;
  while (i < source.size()) {
    std::size_t open = std::string::npos;
    for (std::size_t j = source.find('{', i); j != std::string::npos; j = source.find('{', j + 1))
      if (j + 1 < source.size() && (source[j + 1] == '{' || source[j + 1] == '%' || source[j + 1] == '#')) {
        open = j;
        break;
      }
    const std::size_t text_end = open == std::string::npos ? source.size() : open;
    if (text_end > i) tags.push_back({Tag::text, source.substr(i, text_end - i), pos});
    pos = advance(pos, std::string_view(source).substr(i, text_end - i));
    if (open == std::string::npos) break;
    const char kind = source[open + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    Tag tag;
    tag.kind = kind == '{' ? Tag::output : kind == '%' ? Tag::statement : Tag::comment;
    std::size_t begin = open + 2;
    if (begin < source.size() && source[begin] == '-') tag.strip_before = true, ++begin;
    else if (begin < source.size() && source[begin] == '+') tag.keep_before = true, ++begin;
    // The close outside string literals: `{{ '}}' }}` is one tag, as in Jinja.
    std::size_t end = begin;
    for (char quote = 0; end < source.size(); ++end) {
      const char c = source[end];
      if (quote != 0) {
        if (c == '\\') ++end;
        else if (c == quote) quote = 0;
      } else if (tag.kind != Tag::comment && (c == '\'' || c == '"')) {
        quote = c;
      } else if (source.compare(end, 2, close) == 0) {
        break;
      }
    }
    if (end >= source.size()) end = std::string::npos;
    if (end == std::string::npos)
      fail_at(origin, pos, "'" + source.substr(open, 2) + "' is never closed by '" + close + "'");
    std::size_t content_end = end;
    if (content_end > begin && source[content_end - 1] == '-') tag.strip_after = true, --content_end;
    else if (content_end > begin && source[content_end - 1] == '+') tag.keep_after = true, --content_end;
    tag.at = advance(pos, std::string_view(source).substr(open, begin - open));
    tag.content = source.substr(begin, content_end - begin);
    tags.push_back(std::move(tag));
    pos = advance(pos, std::string_view(source).substr(open, end + 2 - open));
    i = end + 2;
  }
  // Whitespace control, then trim_blocks and lstrip_blocks as transformers sets them.
  for (std::size_t t = 0; t < tags.size(); ++t) {
    if (tags[t].kind != Tag::text) continue;
    std::string& s = tags[t].content;
    const Tag* next = t + 1 < tags.size() ? &tags[t + 1] : nullptr;
    const Tag* prev = t > 0 ? &tags[t - 1] : nullptr;
    const bool block_next = next && next->kind != Tag::output && next->kind != Tag::text;
    const bool block_prev = prev && prev->kind != Tag::output && prev->kind != Tag::text;
    if (next && next->strip_before) {
      s.erase(s.find_last_not_of(" \t\r\n") + 1);
    } else if (block_next && !next->keep_before) {
      const std::size_t line_start = s.rfind('\n');
      const std::size_t tail = line_start == std::string::npos ? 0 : line_start + 1;
      const bool at_line_start = line_start != std::string::npos || prev == nullptr;
      if (at_line_start && s.find_first_not_of(" \t", tail) == std::string::npos) s.erase(tail);
    }
    if (prev && prev->strip_after) {
      s.erase(0, s.find_first_not_of(" \t\r\n") == std::string::npos ? s.size() : s.find_first_not_of(" \t\r\n"));
    } else if (block_prev && !prev->keep_after) {
      if (s.rfind("\r\n", 0) == 0) s.erase(0, 2);
      else if (!s.empty() && s[0] == '\n') s.erase(0, 1);
    }
  }
  return tags;
}

class TemplateParser {
 public:
  TemplateParser(std::vector<Tag> tags, const std::string& origin) : tags_(std::move(tags)), origin_(origin) {}

  std::vector<Node> parse_all() {
    std::string stopped_at;
    std::vector<Node> body = parse_body({}, stopped_at);
    return body;
  }

 private:
  ExprParser expr_parser(const Tag& tag, std::size_t skip_words) {
    std::vector<Token> tokens = lex_expression(tag.content, tag.at, origin_);
    ExprParser p(std::vector<Token>(tokens.begin() + static_cast<std::ptrdiff_t>(skip_words), tokens.end()), origin_);
    return p;
  }

  static std::string keyword_of(const Tag& tag) {
    const std::size_t b = tag.content.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    std::size_t e = b;
    while (e < tag.content.size() && (std::isalnum(static_cast<unsigned char>(tag.content[e])) || tag.content[e] == '_')) ++e;
    return tag.content.substr(b, e - b);
  }

  // Nodes until one of `stops` (a statement keyword) or the end; the stop's
  // keyword goes to `stopped_at` and its tag is left unconsumed.
  std::vector<Node> parse_body(const std::vector<std::string>& stops, std::string& stopped_at) {
    std::vector<Node> body;
    while (pos_ < tags_.size()) {
      const Tag& tag = tags_[pos_];
      if (tag.kind == Tag::comment) {
        ++pos_;
        continue;
      }
      if (tag.kind == Tag::text) {
        if (!tag.content.empty()) body.push_back(text_node(tag));
        ++pos_;
        continue;
      }
      if (tag.kind == Tag::output) {
        Node n;
        n.kind = Node::output;
        n.at = tag.at;
        ExprParser p = expr_parser(tag, 0);
        n.exprs.push_back(p.expression());
        p.expect_end("{{ ... }}");
        body.push_back(std::move(n));
        ++pos_;
        continue;
      }
      const std::string keyword = keyword_of(tag);
      if (std::find(stops.begin(), stops.end(), keyword) != stops.end()) {
        stopped_at = keyword;
        return body;
      }
      body.push_back(statement(tag, keyword));
    }
    if (!stops.empty()) {
      const Tag& last = tags_.empty() ? Tag{} : tags_.back();
      fail_at(origin_, last.at, "the template ends inside a block; expected {% " + stops.front() + " %}");
    }
    return body;
  }

  Node text_node(const Tag& tag) {
    Node n;
    n.kind = Node::text;
    n.content = tag.content;
    n.at = tag.at;
    return n;
  }

  Node statement(const Tag& tag, const std::string& keyword) {
    Node n;
    n.at = tag.at;
    ++pos_;
    if (keyword == "if") {
      n.kind = Node::if_;
      ExprParser p = expr_parser(tag, 1);
      n.exprs.push_back(p.expression());
      p.expect_end("{% if %}");
      while (true) {
        std::string stop;
        n.bodies.push_back(parse_body({"elif", "else", "endif"}, stop));
        const Tag& at = tags_[pos_++];
        ExprParser q = expr_parser(at, 1);
        if (stop == "elif") {
          n.exprs.push_back(q.expression());
          q.expect_end("{% elif %}");
          continue;
        }
        q.expect_end("{% " + stop + " %}");
        if (stop == "else") {
          n.bodies.push_back(parse_body({"endif"}, stop));
          expr_parser(tags_[pos_], 1).expect_end("{% endif %}");
          ++pos_;
        }
        return n;
      }
    }
    if (keyword == "for") {
      n.kind = Node::for_;
      ExprParser p = expr_parser(tag, 1);
      n.targets.push_back(p.expect_name());
      while (p.is_op(",")) {
        p.take();
        n.targets.push_back(p.expect_name());
      }
      if (!p.is_name("in")) p.fail("expected 'in' in {% for %}");
      p.take();
      n.exprs.push_back(p.expression());
      if (p.is_name("recursive")) p.fail("recursive loops are not supported");
      p.expect_end("{% for %}");
      std::string stop;
      n.bodies.push_back(parse_body({"endfor", "else"}, stop));
      if (stop == "else") fail_at(origin_, tags_[pos_].at, "{% for %} ... {% else %} is not supported");
      expr_parser(tags_[pos_], 1).expect_end("{% endfor %}");
      ++pos_;
      return n;
    }
    if (keyword == "set") {
      n.kind = Node::set;
      ExprParser p = expr_parser(tag, 1);
      n.targets.push_back(p.expect_name());
      if (p.is_op(".")) {
        p.take();
        n.targets.push_back(p.expect_name());
      }
      if (!p.is_op("=")) p.fail("block {% set %} ... {% endset %} and tuple targets are not supported; expected '='");
      p.take();
      n.exprs.push_back(p.expression());
      p.expect_end("{% set %}");
      return n;
    }
    if (keyword == "break" || keyword == "continue") {
      n.kind = keyword == "break" ? Node::break_ : Node::continue_;
      expr_parser(tag, 1).expect_end("{% " + keyword + " %}");
      return n;
    }
    if (keyword == "generation") {  // transformers' AssistantTracker: the body renders as is
      n.kind = Node::block;
      expr_parser(tag, 1).expect_end("{% generation %}");
      std::string stop;
      n.bodies.push_back(parse_body({"endgeneration"}, stop));
      ++pos_;
      return n;
    }
    if (keyword == "elif" || keyword == "else" || keyword.rfind("end", 0) == 0)
      fail_at(origin_, tag.at, "{% " + keyword + " %} without the block it would close");
    fail_at(origin_, tag.at,
            "{% " + (keyword.empty() ? tag.content : keyword) +
                " %} is not supported (ftrain-prep renders the Jinja subset of chat templates: if/elif/else, for, "
                "set, break/continue, generation; share/doc/data.md)");
  }

  std::vector<Tag> tags_;
  std::size_t pos_ = 0;
  const std::string& origin_;
};

// ------------------------------------------------------------ evaluation ---

std::string type_name(const json& v) {
  if (is_undefined(v)) return "undefined";
  if (v.is_null()) return "none";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number()) return "float";
  if (v.is_string()) return "string";
  if (v.is_array()) return "list";
  return "dict";
}

bool truthy(const json& v) {
  if (is_undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

std::string python_float(double d) {
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e16) {
    std::ostringstream s;
    s << static_cast<long long>(d) << ".0";
    return s.str();
  }
  std::ostringstream s;
  s.precision(17);
  s << d;
  return s.str();
}

std::string repr(const json& v);

// str(v) as Jinja prints it.
std::string to_text(const json& v) {
  if (is_undefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number()) return python_float(v.get<double>());
  return repr(v);
}

std::string repr(const json& v) {
  if (v.is_string()) {
    std::string out = "'";
    for (const char c : v.get_ref<const std::string&>()) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') out += "\\n";
      else out += c;
    }
    return out + "'";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + repr(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      out += (first ? "" : ", ") + repr(json(k)) + ": " + repr(x);
      first = false;
    }
    return out + "}";
  }
  return to_text(v);
}

bool python_equal(const json& a, const json& b) {
  if (is_undefined(a) || is_undefined(b)) return is_undefined(a) && is_undefined(b);
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

struct LoopControl {
  bool break_ = false;
  bool continue_ = false;
};

class Renderer {
 public:
  // `context` is read in place (the messages are not copied per render); the
  // template's own variables live in scopes_ above it.
  Renderer(const std::string& origin, const json& context, bool neighbours)
      : origin_(origin), context_(context), neighbours_(neighbours) {
    scopes_.emplace_back();
  }

  void render(const std::vector<Node>& body, std::string& out, LoopControl* loop) {
    for (const Node& n : body) {
      if (loop && (loop->break_ || loop->continue_)) return;
      switch (n.kind) {
        case Node::text: out += n.content; break;
        case Node::output: out += to_text(eval(*n.exprs[0])); break;
        case Node::if_: {
          std::size_t b = 0;
          for (; b < n.exprs.size(); ++b)
            if (truthy(eval(*n.exprs[b]))) break;
          if (b < n.bodies.size()) render(n.bodies[b], out, loop);
          break;
        }
        case Node::for_: render_for(n, out); break;
        case Node::set: assign(n); break;
        case Node::break_:
        case Node::continue_:
          if (!loop) fail_at(origin_, n.at, "{% break %} or {% continue %} outside a loop");
          (n.kind == Node::break_ ? loop->break_ : loop->continue_) = true;
          return;
        case Node::block: {
          const std::size_t start = out.size();
          render(n.bodies[0], out, loop);
          if (generation_ != nullptr && out.size() > start) generation_->emplace_back(start, out.size());
          break;
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const Expr& e, const std::string& what) const { fail_at(origin_, e.at, what); }

  json* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const auto found = it->find(name); found != it->end()) return &found->second;
    return nullptr;
  }
  const json* lookup_read(const std::string& name) {
    if (const json* v = lookup(name)) return v;
    const auto it = context_.find(name);
    return it == context_.end() ? nullptr : &*it;
  }

  // The value a variable, or a key or index of one, names, without copying
  // it; null for an expression that computes a new value.
  const json* ref(const Expr& e) {
    static const json kUndefined = undefined();
    if (e.kind == Expr::name) {
      const json* v = lookup_read(e.text);
      return v ? v : is_function(e.text) ? nullptr : &kUndefined;
    }
    if (e.kind != Expr::attr && e.kind != Expr::item) return nullptr;
    const json* base = ref(*e.args[0]);
    if (base == nullptr) return nullptr;
    if (is_undefined(*base)) fail(e, e.kind == Expr::attr ? "'" + e.text + "' of an undefined value" : "subscript of an undefined value");
    if (e.kind == Expr::attr || base->is_object()) {
      if (!base->is_object()) return &kUndefined;
      std::string key = e.text;
      if (e.kind == Expr::item) {
        const json k = eval(*e.args[1]);
        if (!k.is_string()) return &kUndefined;
        key = k.get<std::string>();
      }
      const auto it = base->find(key);
      return it == base->end() ? &kUndefined : &*it;
    }
    if (!base->is_array()) return nullptr;  // a string's character is a new value
    const json k = eval(*e.args[1]);
    if (!k.is_number_integer()) return &kUndefined;
    std::int64_t i = k.get<std::int64_t>();
    const auto n = static_cast<std::int64_t>(base->size());
    if (i < 0) i += n;
    return i < 0 || i >= n ? &kUndefined : &(*base)[static_cast<std::size_t>(i)];
  }

  const json& value_of(const Expr& e, json& storage) {
    if (const json* r = ref(e)) return *r;
    storage = eval(e);
    return storage;
  }

  void assign(const Node& n) {
    json value = eval(*n.exprs[0]);
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = std::move(value);
      return;
    }
    json* ns = lookup(n.targets[0]);
    if (!ns || !ns->is_object()) fail_at(origin_, n.at, "'" + n.targets[0] + "' is not a namespace()");
    (*ns)[n.targets[1]] = std::move(value);
  }

  void render_for(const Node& n, std::string& out) {
    json storage;
    const json& iterable = value_of(*n.exprs[0], storage);
    json items = json::array();
    if (iterable.is_array()) items = &iterable == &storage ? std::move(storage) : iterable;
    else if (iterable.is_object()) for (const auto& [k, v] : iterable.items()) items.push_back(k);
    else if (iterable.is_string()) for (const char c : iterable.get<std::string>()) items.push_back(std::string(1, c));
    else if (!is_undefined(iterable) && !iterable.is_null())
      fail(*n.exprs[0], "cannot loop over a " + type_name(iterable));
    else if (is_undefined(iterable)) fail(*n.exprs[0], "loop over an undefined value");
    const auto length = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < length; ++i) {
      auto& scope = scopes_.emplace_back();
      const json& item = items[static_cast<std::size_t>(i)];
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
      } else {
        if (!item.is_array() || item.size() != n.targets.size())
          fail_at(origin_, n.at, "cannot unpack " + repr(item) + " into " + std::to_string(n.targets.size()) + " names");
        for (std::size_t t = 0; t < n.targets.size(); ++t) scope[n.targets[t]] = item[t];
      }
      json loop = {{"index0", i},          {"index", i + 1},         {"first", i == 0},
                   {"last", i + 1 == length}, {"length", length},      {"revindex", length - i},
                   {"revindex0", length - i - 1}};
      if (neighbours_) {  // copies of two messages per iteration: only for templates that read them
        loop["previtem"] = i > 0 ? items[static_cast<std::size_t>(i - 1)] : undefined();
        loop["nextitem"] = i + 1 < length ? items[static_cast<std::size_t>(i + 1)] : undefined();
      }
      scope["loop"] = std::move(loop);
      LoopControl control;
      render(n.bodies[0], out, &control);
      scopes_.pop_back();
      if (control.break_) break;
    }
  }

  json eval(const Expr& e) {
    switch (e.kind) {
      case Expr::literal: return e.value;
      case Expr::name: {
        const json* v = lookup_read(e.text);
        if (v) return *v;
        // A global function is defined (`strftime_now is defined`, Llama 3.2's test).
        return is_function(e.text) ? json("<function " + e.text + ">") : undefined();
      }
      case Expr::list: {
        json out = json::array();
        for (const auto& a : e.args) out.push_back(eval(*a));
        return out;
      }
      case Expr::dict: {
        json out = json::object();
        for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
          const json key = eval(*e.args[k]);
          if (!key.is_string()) fail(*e.args[k], "dict keys must be strings here, got a " + type_name(key));
          out[key.get<std::string>()] = eval(*e.args[k + 1]);
        }
        return out;
      }
      case Expr::attr: {
        json storage;
        return get_attr(e, value_of(*e.args[0], storage), e.text);
      }
      case Expr::item: {
        json storage;
        return get_item(e, value_of(*e.args[0], storage), eval(*e.args[1]));
      }
      case Expr::slice: return slice(e);
      case Expr::call: return call(e);
      case Expr::filter: return filter(e);
      case Expr::test: return test(e) != e.negated;
      case Expr::unary: {
        const json v = eval(*e.args[0]);
        if (e.text == "not") return !truthy(v);
        if (!v.is_number()) fail(e, "unary " + e.text + " on a " + type_name(v));
        if (e.text == "+") return v;
        return v.is_number_integer() ? json(-v.get<std::int64_t>()) : json(-v.get<double>());
      }
      case Expr::cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args.size() > 2 ? eval(*e.args[2]) : undefined();
      case Expr::binary: return binary(e);
    }
    fail(e, "unknown expression");
  }

  json get_attr(const Expr& e, const json& object, const std::string& name) {
    if (is_undefined(object)) fail(e, "'" + name + "' of an undefined value");
    if (object.is_object()) {
      const auto it = object.find(name);
      return it == object.end() ? undefined() : *it;
    }
    return undefined();  // methods are resolved by call()
  }

  json get_item(const Expr& e, const json& object, const json& key) {
    if (is_undefined(object)) fail(e, "subscript of an undefined value");
    if (object.is_object() && key.is_string()) {
      const auto it = object.find(key.get<std::string>());
      return it == object.end() ? undefined() : *it;
    }
    if ((object.is_array() || object.is_string()) && key.is_number_integer()) {
      const auto n = static_cast<std::int64_t>(object.is_array() ? object.size() : object.get_ref<const std::string&>().size());
      std::int64_t i = key.get<std::int64_t>();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return undefined();
      if (object.is_array()) return object[static_cast<std::size_t>(i)];
      return std::string(1, object.get_ref<const std::string&>()[static_cast<std::size_t>(i)]);
    }
    return undefined();
  }

  json slice(const Expr& e) {
    const json object = eval(*e.args[0]);
    const auto bound = [&](std::size_t k) -> std::optional<std::int64_t> {
      if (k >= e.args.size() || !e.args[k]) return std::nullopt;
      const json v = eval(*e.args[k]);
      if (v.is_null()) return std::nullopt;
      if (!v.is_number_integer()) fail(e, "slice bounds must be integers, got a " + type_name(v));
      return v.get<std::int64_t>();
    };
    if (!object.is_array() && !object.is_string()) fail(e, "cannot slice a " + type_name(object));
    const auto n = static_cast<std::int64_t>(object.is_array() ? object.size() : object.get_ref<const std::string&>().size());
    const std::int64_t step = bound(3).value_or(1);
    if (step == 0) fail(e, "slice step cannot be zero");
    const auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
      if (!v) return fallback;
      std::int64_t x = *v < 0 ? *v + n : *v;
      return step > 0 ? std::clamp<std::int64_t>(x, 0, n) : std::clamp<std::int64_t>(x, -1, n - 1);
    };
    const std::int64_t start = clamp(bound(1), step > 0 ? 0 : n - 1), stop = clamp(bound(2), step > 0 ? n : -1);
    json out = object.is_array() ? json::array() : json("");
    std::string text;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (object.is_array()) out.push_back(object[static_cast<std::size_t>(i)]);
      else text += object.get_ref<const std::string&>()[static_cast<std::size_t>(i)];
    }
    return object.is_array() ? out : json(text);
  }

  std::vector<json> positional(const Expr& e, std::size_t first) {
    std::vector<json> out;
    for (std::size_t i = first; i + e.kwarg_names.size() < e.args.size(); ++i) out.push_back(eval(*e.args[i]));
    return out;
  }

  // Python's str.strip: `chars` null strips Unicode whitespace (str.isspace:
  // NBSP and U+3000 too, not only ASCII), else the bytes of `chars`.
  static std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
    std::size_t b = 0, end = s.size();
    if (chars != nullptr) {
      const auto in = [&](char c) { return chars->find(c) != std::string::npos; };
      if (left) while (b < end && in(s[b])) ++b;
      if (right) while (end > b && in(s[end - 1])) --end;
      return s.substr(b, end - b);
    }
    static const char* kSpaces[] = {" ", "\t", "\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x1f",
                                    "\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
                                    "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86",
                                    "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8",
                                    "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    const auto space_at = [&](std::size_t i, bool backwards) -> std::size_t {  // its length, or 0
      for (const char* sp : kSpaces) {
        const std::size_t n = std::char_traits<char>::length(sp);
        if (backwards ? (i >= b + n && s.compare(i - n, n, sp) == 0) : (i + n <= end && s.compare(i, n, sp) == 0))
          return n;
      }
      return 0;
    };
    if (left) for (std::size_t n; b < end && (n = space_at(b, false)) > 0;) b += n;
    if (right) for (std::size_t n; end > b && (n = space_at(end, true)) > 0;) end -= n;
    return s.substr(b, end - b);
  }

  static std::string case_map(std::string s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
    bool word_start = true;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      const bool upper = mode == 1 || ((mode == 2 && word_start) || (mode == 3 && i == 0));
      s[i] = static_cast<char>(upper ? std::toupper(c) : std::tolower(c));
      word_start = !std::isalpha(c);
    }
    return s;
  }

  json string_method(const Expr& e, const std::string& s, const std::string& method, const std::vector<json>& args) {
    const auto arg_string = [&](std::size_t i, const std::string& fallback) {
      if (i >= args.size() || args[i].is_null()) return fallback;
      if (!args[i].is_string()) fail(e, method + "() expects a string argument");
      return args[i].get<std::string>();
    };
    if (method == "strip" || method == "lstrip" || method == "rstrip") {
      const std::string chars = arg_string(0, "");
      const bool given = !args.empty() && !args[0].is_null();
      return strip(s, given ? &chars : nullptr, method != "rstrip", method != "lstrip");
    }
    if (method == "lower") return case_map(s, 0);
    if (method == "upper") return case_map(s, 1);
    if (method == "title") return case_map(s, 2);
    if (method == "capitalize") return case_map(s, 3);
    if (method == "startswith") return s.rfind(arg_string(0, ""), 0) == 0;
    if (method == "endswith") {
      const std::string suffix = arg_string(0, "");
      return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
    }
    if (method == "replace") return replace_all(s, arg_string(0, ""), arg_string(1, ""));
    if (method == "split") {
      json out = json::array();
      const std::string sep = arg_string(0, "");
      if (sep.empty()) {
        std::istringstream words(s);
        for (std::string w; words >> w;) out.push_back(w);
        return out;
      }
      std::size_t b = 0;
      for (std::size_t f; (f = s.find(sep, b)) != std::string::npos; b = f + sep.size()) out.push_back(s.substr(b, f - b));
      out.push_back(s.substr(b));
      return out;
    }
    fail(e, "string method '" + method + "' is not supported");
  }

  static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
    return s;
  }

  static bool is_function(const std::string& name) {
    return name == "raise_exception" || name == "namespace" || name == "range" || name == "strftime_now";
  }

  json call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::attr) {
      json storage;
      const json& object = value_of(*callee.args[0], storage);
      const std::vector<json> args = positional(e, 1);
      if (object.is_string()) return string_method(e, object.get<std::string>(), callee.text, args);
      if (object.is_object()) {
        if (callee.text == "items" || callee.text == "keys" || callee.text == "values") {
          json out = json::array();
          for (const auto& [k, v] : object.items())
            out.push_back(callee.text == "items" ? json::array({k, v}) : callee.text == "keys" ? json(k) : v);
          return out;
        }
        if (callee.text == "get") {
          if (args.empty() || !args[0].is_string()) fail(e, "get() expects a key");
          const auto it = object.find(args[0].get<std::string>());
          return it != object.end() ? *it : args.size() > 1 ? args[1] : json(nullptr);
        }
      }
      fail(e, "method '" + callee.text + "' of a " + type_name(object) + " is not supported");
    }
    if (callee.kind != Expr::name) fail(e, "only named functions and methods can be called");
    if (lookup_read(callee.text) == nullptr) {
      if (callee.text == "raise_exception") {
        const std::vector<json> args = positional(e, 1);
        FT_USER_ERROR() << origin_ << ": line " << e.at.line << ": the chat template raised an exception: "
                        << (args.empty() ? std::string() : to_text(args[0]));
      }
      if (callee.text == "namespace") {
        json ns = json::object();
        for (const json& a : positional(e, 1)) {
          if (!a.is_object()) fail(e, "namespace() takes keyword arguments or a dict");
          ns.update(a);
        }
        const std::size_t first_kw = e.args.size() - e.kwarg_names.size();
        for (std::size_t k = 0; k < e.kwarg_names.size(); ++k) ns[e.kwarg_names[k]] = eval(*e.args[first_kw + k]);
        return ns;
      }
      if (callee.text == "strftime_now") {  // transformers' global: the local date and time now
        const std::vector<json> args = positional(e, 1);
        if (args.size() != 1 || !args[0].is_string()) fail(e, "strftime_now() takes one format string");
        const std::time_t now = std::time(nullptr);
        std::tm local{};
        localtime_r(&now, &local);
        char buffer[256];
        const std::size_t n = std::strftime(buffer, sizeof buffer, args[0].get_ref<const std::string&>().c_str(), &local);
        return std::string(buffer, n);
      }
      if (callee.text == "range") {
        const std::vector<json> args = positional(e, 1);
        for (const json& a : args)
          if (!a.is_number_integer()) fail(e, "range() takes integers");
        const std::int64_t start = args.size() > 1 ? args[0].get<std::int64_t>() : 0;
        const std::int64_t stop = args.size() == 1 ? args[0].get<std::int64_t>() : args.size() > 1 ? args[1].get<std::int64_t>() : 0;
        const std::int64_t step = args.size() > 2 ? args[2].get<std::int64_t>() : 1;
        if (step == 0) fail(e, "range() step cannot be zero");
        json out = json::array();
        for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
        return out;
      }
    }
    fail(e, "function '" + callee.text + "' is not supported (raise_exception, namespace, range and strftime_now are)");
  }

  json filter(const Expr& e) {
    json storage;
    const json& v = value_of(*e.args[0], storage);
    const std::vector<json> args = positional(e, 1);
    const std::string& f = e.text;
    const auto need_string = [&]() -> std::string {
      if (!v.is_string()) fail(e, "filter '" + f + "' on a " + type_name(v) + ", expected a string");
      return v.get<std::string>();
    };
    if (f == "trim") {
      const std::string chars = args.empty() || args[0].is_null() ? std::string() : to_text(args[0]);
      return strip(need_string(), args.empty() || args[0].is_null() ? nullptr : &chars, true, true);
    }
    if (f == "upper") return case_map(need_string(), 1);
    if (f == "lower") return case_map(need_string(), 0);
    if (f == "title") return case_map(need_string(), 2);
    if (f == "capitalize") return case_map(need_string(), 3);
    if (f == "string") return to_text(v);
    if (f == "replace") {
      if (args.size() < 2) fail(e, "replace needs two arguments");
      return replace_all(need_string(), to_text(args[0]), to_text(args[1]));
    }
    if (f == "length" || f == "count") {
      if (v.is_string()) return static_cast<std::int64_t>(v.get_ref<const std::string&>().size());
      if (v.is_array() || v.is_object()) return static_cast<std::int64_t>(v.size());
      fail(e, "length of a " + type_name(v));
    }
    if (f == "first" || f == "last") {
      if (!v.is_array()) fail(e, f + " of a " + type_name(v));
      return v.empty() ? undefined() : f == "first" ? v.front() : v.back();
    }
    if (f == "list") {
      if (v.is_array()) return v;
      if (v.is_string()) {
        json out = json::array();
        for (const char c : v.get<std::string>()) out.push_back(std::string(1, c));
        return out;
      }
      fail(e, "list of a " + type_name(v));
    }
    if (f == "reverse") {
      if (v.is_string()) return std::string(v.get<std::string>().rbegin(), v.get<std::string>().rend());
      if (!v.is_array()) fail(e, "reverse of a " + type_name(v));
      return json(std::vector<json>(v.rbegin(), v.rend()));
    }
    if (f == "join") {
      if (!v.is_array()) fail(e, "join of a " + type_name(v));
      std::string out;
      for (std::size_t i = 0; i < v.size(); ++i) out += (i ? (args.empty() ? "" : to_text(args[0])) : "") + to_text(v[i]);
      return out;
    }
    if (f == "int") {
      if (v.is_number()) return static_cast<std::int64_t>(v.get<double>());
      try {
        return std::stoll(to_text(v));
      } catch (const std::exception&) {
        return 0;
      }
    }
    if (f == "tojson") {
      // transformers' tojson is json.dumps(x, ensure_ascii=False, indent=indent): the key order of a mapping is
      // its insertion order there, which the JSON read here does not keep; such values are refused.
      std::optional<int> indent;
      const std::size_t first_kw = e.args.size() - e.kwarg_names.size();
      for (std::size_t k = 0; k < e.kwarg_names.size(); ++k) {
        const json v = eval(*e.args[first_kw + k]);
        if (e.kwarg_names[k] != "indent" || !(v.is_number_integer() || v.is_null()))
          fail(e, "tojson takes only indent=N here");
        if (v.is_number_integer()) indent = static_cast<int>(v.get<std::int64_t>());
      }
      if (!args.empty()) indent = args[0].is_number_integer() ? std::optional<int>(static_cast<int>(args[0].get<std::int64_t>())) : std::nullopt;
      std::string out;
      python_dumps(e, v, indent, 0, out);
      return out;
    }
    if (f == "default" || f == "d") {
      const bool boolean = args.size() > 1 && truthy(args[1]);
      if (is_undefined(v) || (boolean && !truthy(v))) return args.empty() ? json("") : args[0];
      return v;
    }
    fail(e, "filter '" + f + "' is not supported");
  }

  void python_dumps(const Expr& e, const json& v, std::optional<int> indent, int depth, std::string& out) {
    const auto newline = [&](int level) {
      if (indent) out += "\n" + std::string(static_cast<std::size_t>(*indent * level), ' ');
    };
    if (v.is_object() && v.size() > 1)
      fail(e, "tojson of a mapping with several keys: their order (Python keeps insertion order) is not kept here");
    if (is_undefined(v)) fail(e, "tojson of an undefined value");
    if (v.is_array() || v.is_object()) {
      const bool array = v.is_array();
      out += array ? "[" : "{";
      if (v.empty()) {
        out += array ? "]" : "}";
        return;
      }
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        out += first ? "" : indent ? "," : ", ";
        first = false;
        newline(depth + 1);
        if (!array) out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::strict) + ": ";
        python_dumps(e, *it, indent, depth + 1, out);
      }
      newline(depth);
      out += array ? "]" : "}";
      return;
    }
    if (v.is_boolean()) out += v.get<bool>() ? "true" : "false";
    else if (v.is_null()) out += "null";
    else if (v.is_number_float()) out += python_float(v.get<double>());
    else out += v.dump(-1, ' ', false, json::error_handler_t::strict);  // strings: Python's escapes with ensure_ascii off
  }

  bool test(const Expr& e) {
    json storage;
    const json& v = value_of(*e.args[0], storage);
    const std::string& t = e.text;
    if (t == "defined") return !is_undefined(v);
    if (t == "undefined") return is_undefined(v);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number() && !v.is_boolean();
    if (t == "integer") return v.is_number_integer();
    if (t == "float") return v.is_number_float();
    if (t == "boolean") return v.is_boolean();
    if (t == "true") return v.is_boolean() && v.get<bool>();
    if (t == "false") return v.is_boolean() && !v.get<bool>();
    if (t == "mapping") return v.is_object();
    if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || v.is_object();
    if (t == "even" || t == "odd") {
      if (!v.is_number_integer()) fail(e, "'" + t + "' test of a " + type_name(v));
      return (v.get<std::int64_t>() % 2 == 0) == (t == "even");
    }
    if (t == "equalto" || t == "eq" || t == "sameas") {
      if (e.args.size() < 2) fail(e, "'" + t + "' needs a value to compare with");
      return python_equal(v, eval(*e.args[1]));
    }
    fail(e, "test '" + t + "' is not supported");
  }

  json binary(const Expr& e) {
    const std::string& op = e.text;
    if (op == "and") {
      json l = eval(*e.args[0]);
      return truthy(l) ? eval(*e.args[1]) : l;
    }
    if (op == "or") {
      json l = eval(*e.args[0]);
      return truthy(l) ? l : eval(*e.args[1]);
    }
    json left_storage, right_storage;
    const json& l = value_of(*e.args[0], left_storage);
    const json& r = value_of(*e.args[1], right_storage);
    if (op == "==") return python_equal(l, r);
    if (op == "!=") return !python_equal(l, r);
    if (op == "~") return to_text(l) + to_text(r);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string() && l.is_string()) found = r.get_ref<const std::string&>().find(l.get<std::string>()) != std::string::npos;
      else if (r.is_array()) found = std::any_of(r.begin(), r.end(), [&](const json& x) { return python_equal(x, l); });
      else if (r.is_object() && l.is_string()) found = r.contains(l.get<std::string>());
      else fail(e, "'" + op + "' with a " + type_name(l) + " and a " + type_name(r));
      return found == (op == "in");
    }
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c = 0;
      if (l.is_number() && r.is_number()) c = l.get<double>() < r.get<double>() ? -1 : l.get<double>() > r.get<double>() ? 1 : 0;
      else if (l.is_string() && r.is_string()) c = l.get<std::string>().compare(r.get<std::string>());
      else fail(e, "cannot compare a " + type_name(l) + " with a " + type_name(r));
      return op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) return l.get<std::string>() + r.get<std::string>();
      if (l.is_array() && r.is_array()) {
        json out = l;
        for (const json& x : r) out.push_back(x);
        return out;
      }
    }
    if (op == "*" && (l.is_string() && r.is_number_integer() || l.is_number_integer() && r.is_string())) {
      const std::string& unit = (l.is_string() ? l : r).get_ref<const std::string&>();
      std::string out;
      for (std::int64_t i = 0; i < (l.is_string() ? r : l).get<std::int64_t>(); ++i) out += unit;
      return out;
    }
    if (!l.is_number() || !r.is_number() || l.is_boolean() || r.is_boolean())
      fail(e, "unsupported operand types for " + op + ": " + type_name(l) + " and " + type_name(r));
    const bool ints = l.is_number_integer() && r.is_number_integer();
    if (ints && op != "/" && op != "**") {
      const std::int64_t a = l.get<std::int64_t>(), b = r.get<std::int64_t>();
      if ((op == "//" || op == "%") && b == 0) fail(e, "integer division or modulo by zero");
      if (op == "+") return a + b;
      if (op == "-") return a - b;
      if (op == "*") return a * b;
      const std::int64_t q = a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);  // Python floors
      if (op == "//") return q;
      if (op == "%") return a - q * b;
    }
    const double a = l.get<double>(), b = r.get<double>();
    if (op == "+") return a + b;
    if (op == "-") return a - b;
    if (op == "*") return a * b;
    if (op == "**") return ints && b >= 0 ? json(static_cast<std::int64_t>(std::llround(std::pow(a, b)))) : json(std::pow(a, b));
    if (b == 0.0) fail(e, "division by zero");
    if (op == "/") return a / b;
    if (op == "//") return std::floor(a / b);
    if (op == "%") return a - std::floor(a / b) * b;
    fail(e, "unknown operator " + op);
  }

  const std::string& origin_;
  const json& context_;
  bool neighbours_;  // loop.previtem / loop.nextitem
 public:
  std::vector<std::pair<std::size_t, std::size_t>>* generation_ = nullptr;  // {% generation %} output, when asked
 private:
  std::vector<std::map<std::string, json>> scopes_;
};

}  // namespace

namespace {
bool contains_block(const std::vector<Node>& body) {
  for (const Node& n : body) {
    if (n.kind == Node::block) return true;
    for (const auto& b : n.bodies)
      if (contains_block(b)) return true;
  }
  return false;
}
}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string origin)
    : origin_(std::move(origin)),
      neighbours_(source.find("previtem") != std::string::npos || source.find("nextitem") != std::string::npos) {
  body_ = TemplateParser(split_tags(source, origin_), origin_).parse_all();
  generation_blocks_ = contains_block(body_);
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const json& context, std::vector<std::pair<std::size_t, std::size_t>>* generation) const {
  FT_CHECK(context.is_object()) << "chat template context must be a JSON object";
  std::string out;
  Renderer renderer(origin_, context, neighbours_);
  renderer.generation_ = generation;
  renderer.render(body_, out, nullptr);
  return out;
}

// -------------------------------------------------- the model's template ---

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) FT_USER_ERROR() << path.string() << ": cannot open";
  return std::string(std::istreambuf_iterator<char>(in), {});
}

json read_json(const fs::path& path) {
  try {
    return json::parse(read_text(path));
  } catch (const json::parse_error& e) {
    FT_USER_ERROR() << path.string() << ": malformed JSON (" << e.what() << ")";
  }
}

// tokenizer_config.json's special tokens: strings, or AddedToken dicts.
json special_tokens_of(const json& config, const fs::path& path) {
  json out = json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_string()) out[key] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out[key] = (*it)["content"];
    else FT_USER_ERROR() << path.string() << ": " << key << " is neither a string nor {\"content\": ...}";
  }
  return out;
}

// chat_template of a tokenizer_config.json: the string, the "default" of a
// list of named templates, or "" when absent.
std::string template_of(const json& config, const fs::path& path) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const json& named : *it)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
    FT_USER_ERROR() << path.string() << ": chat_template is a list of named templates without one named \"default\"";
  }
  FT_USER_ERROR() << path.string() << ": chat_template is neither a string nor a list of {name, template}";
}

}  // namespace

ModelChatTemplate load_model_chat_template(const std::string& path) {
  const fs::path p(path);
  if (!fs::is_regular_file(p)) FT_USER_ERROR() << path << ": chat template file not found";
  ModelChatTemplate model;
  model.path = path;
  std::string source;
  if (p.extension() == ".json") {
    const json config = read_json(p);
    if (!config.is_object()) FT_USER_ERROR() << path << ": not a JSON object";
    source = template_of(config, p);
    if (source.empty()) FT_USER_ERROR() << path << ": no chat_template in it";
    model.special_tokens = special_tokens_of(config, p);
    model.chat_template = std::make_unique<ChatTemplate>(source, path + " chat_template");
    return model;
  }
  source = read_text(p);
  const fs::path config = p.parent_path() / "tokenizer_config.json";
  if (fs::is_regular_file(config)) {
    const json c = read_json(config);
    if (c.is_object()) model.special_tokens = special_tokens_of(c, config);
  }
  model.chat_template = std::make_unique<ChatTemplate>(source, path);
  return model;
}

std::unique_ptr<ModelChatTemplate> find_model_chat_template(const std::string& tokenizer_path, std::string& looked_in) {
  const fs::path p(tokenizer_path);
  const fs::path dir = fs::is_directory(p) ? p : p.parent_path().empty() ? fs::path(".") : p.parent_path();
  looked_in = dir.string();
  const fs::path config = dir / "tokenizer_config.json";
  if (fs::is_regular_file(config)) {
    const json c = read_json(config);
    if (c.is_object() && !template_of(c, config).empty())
      return std::make_unique<ModelChatTemplate>(load_model_chat_template(config.string()));
  }
  if (fs::is_regular_file(dir / "chat_template.jinja"))
    return std::make_unique<ModelChatTemplate>(load_model_chat_template((dir / "chat_template.jinja").string()));
  return nullptr;
}

RenderedChat render_model_chat(const json& messages, const ModelChatTemplate& model, const std::string& where) {
  FT_CHECK(messages.is_array());
  json context = model.special_tokens;
  context["tools"] = nullptr;  // apply_chat_template passes them, as None without tools
  context["documents"] = nullptr;
  context["messages"] = json::array();
  json& shown = context["messages"];  // the conversation so far: grows message by message
  const auto render = [&](bool generation_prompt) {
    context["add_generation_prompt"] = generation_prompt;
    try {
      return model.chat_template->render(context);
    } catch (const UserError& e) {
      FT_USER_ERROR() << where << ": rendering the first " << shown.size() << " message(s): " << e.what();
    }
  };
  if (model.chat_template->has_generation_blocks()) {
    // The template marks what the assistant generates: that is trained, as
    // transformers' return_assistant_tokens_mask has it.
    for (const json& m : messages) shown.push_back(m);
    RenderedChat out;
    context["add_generation_prompt"] = false;
    try {
      out.text = model.chat_template->render(context, &out.trained);
    } catch (const UserError& e) {
      FT_USER_ERROR() << where << ": rendering the " << shown.size() << " message(s): " << e.what();
    }
    std::sort(out.trained.begin(), out.trained.end());  // a block inside another closes first
    return out;
  }
  // Each assistant turn is what adding it adds to the conversation before it
  // (rendered with the generation prompt when the template writes that
  // before the answer, so the assistant header stays untrained).
  std::vector<std::pair<std::size_t, std::string>> turns;  // (message, rendering up to and with it)
  RenderedChat out;
  for (std::size_t m = 0; m < messages.size(); ++m) {
    const bool assistant = messages[m].is_object() && messages[m].value("role", "") == "assistant";
    if (assistant && m == 0)
      FT_USER_ERROR() << where << ": message 0 is the assistant's; a conversation starts with a user or system message";
    std::string before = assistant ? render(true) : std::string();
    shown.push_back(messages[m]);
    if (!assistant) continue;
    std::string with_turn = render(false);
    if (with_turn.rfind(before, 0) != 0) {
      shown.erase(shown.size() - 1);
      before = render(false);
      shown.push_back(messages[m]);
    }
    if (with_turn.rfind(before, 0) != 0)
      FT_USER_ERROR() << where << ": message " << m << ": the chat template (" << model.path
                      << ") renders the conversation before this assistant turn differently from the beginning of "
                      << "the conversation with it, so the turn's text cannot be told apart for the loss mask";
    // The turn's end marker (eos, <|eot_id|>, <|im_end|>\n) is part of what it adds.
    if (with_turn.size() > before.size()) out.trained.emplace_back(before.size(), with_turn.size());
    turns.emplace_back(m, std::move(with_turn));
  }
  out.text = !turns.empty() && turns.back().first + 1 == messages.size() ? turns.back().second : render(false);
  for (const auto& [m, text] : turns)
    if (out.text.rfind(text, 0) != 0)
      FT_USER_ERROR() << where << ": message " << m << ": the chat template (" << model.path
                      << ") renders the conversation up to this assistant turn differently from the beginning of the "
                      << "whole conversation, so the turn's text cannot be told apart for the loss mask";
  return out;
}

}  // namespace ftrain::data
