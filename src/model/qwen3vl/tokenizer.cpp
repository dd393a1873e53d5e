// Tokenizer: see model/qwen3vl/tokenizer.h for the supported tokenizer.json subset. BPE merges in Hugging Face's order
// (a heap of candidate pairs by rank, then position; see Impl::bpe).
#include "model/qwen3vl/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/files.h"
#include "core/json_limits.h"

namespace h3 {

namespace {

using json = nlohmann::json;

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes take code
// points 256, 257, ... in byte order, so that every byte has a visible, non-space character.
std::array<std::string, 256> byte_alphabet() {
  std::array<std::string, 256> out;
  auto encode_cp = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {  // every code point here is below 0x800
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    out[b] = encode_cp(printable ? static_cast<uint32_t>(b) : next++);
  }
  return out;
}

struct RegexDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
using Regex = std::shared_ptr<pcre2_code>;

Regex compile_regex(const std::string& pattern, const std::string& source) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("{}: pre-tokenizer regex does not compile at offset {}: {}", source, off, reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code,
                    PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is used when JIT is absent
  return Regex(code, RegexDeleter{});
}

// Splits `text` into matches and the gaps between them, all kept in order ("Isolated" behaviour).
void split_isolated(const pcre2_code* re, std::string_view text, std::vector<std::string>& out) {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(re, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, gap = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(re, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("tokenizer: regex match failed with PCRE2 error {}", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // an empty match carries no text: step over one whole UTF-8 character
      if (b >= text.size()) break;
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (b > gap) out.emplace_back(text.substr(gap, b - gap));
    out.emplace_back(text.substr(b, e - b));
    gap = pos = e;
  }
  if (gap < text.size()) out.emplace_back(text.substr(gap));
}

// GPT-2's own split, used by a ByteLevel pre-tokenizer with use_regex = true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct PreStep {
  Regex regex;                    // null: no split in this step
  bool add_prefix_space = false;  // ByteLevel only
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool lstrip = false, rstrip = false;
};

json parse_json(const std::string& text, const std::string& source) {
  try {
    return parse_json_bounded(text, source);  // nesting and duplicate keys bounded (core/json_limits.h)
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({}); expected a Hugging Face tokenizer.json", source, e.what());
  }
}

std::string json_type(const json& j, const std::string& source, const char* what) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail("{}: {} has no \"type\" string", source, what);
  return j["type"].get<std::string>();
}

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0 || cp < 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

}  // namespace

std::string utf8_nfc(std::string_view text, const std::string& what) {
  if (text.empty()) return {};
  if (size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    fail("{}: input is not valid UTF-8 (byte {} of {}, value 0x{:02x}); pass UTF-8 text", what, bad, text.size(),
         static_cast<unsigned char>(text[bad]));
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &dst, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("{}: NFC normalisation failed: {}", what, utf8proc_errmsg(n));
  std::string out(reinterpret_cast<char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

struct Tokenizer::Impl {
  std::string source;
  bool nfc = false;
  std::vector<PreStep> pre;
  std::unordered_map<std::string, int32_t> vocab;  // model vocabulary and added tokens
  std::unordered_map<int32_t, std::string> id_to_token;
  std::unordered_map<int32_t, bool> id_is_added;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> (rank, merged id)
  std::array<int32_t, 256> byte_id{};                                // -1: the byte's character is not in vocab
  std::array<std::string, 256> alphabet = byte_alphabet();
  std::unordered_map<std::string, uint8_t> alphabet_inverse;
  std::vector<AddedToken> added;  // longest first, so the first hit at a position is the longest
  int32_t unk_id = -1;

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void load(const json& j);
  void load_normalizer(const json& n);
  void load_pre_tokenizer(const json& p, bool& have_byte_level);
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::load_normalizer(const json& n) {
  if (n.is_null()) return;
  const std::string type = json_type(n, source, "normalizer");
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence") {
    for (const auto& s : n.value("normalizers", json::array())) load_normalizer(s);
  } else {
    fail("{}: normalizer type \"{}\" is not supported (NFC or Sequence of NFC)", source, type);
  }
}

void Tokenizer::Impl::load_pre_tokenizer(const json& p, bool& have_byte_level) {
  if (p.is_null()) return;
  const std::string type = json_type(p, source, "pre_tokenizer");
  if (type == "Sequence") {
    for (const auto& s : p.value("pretokenizers", json::array())) load_pre_tokenizer(s, have_byte_level);
  } else if (type == "Split") {
    const json& pat = p.value("pattern", json::object());
    std::string regex;
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      regex = pat["Regex"].get<std::string>();
    } else if (pat.contains("String") && pat["String"].is_string()) {
      // A literal: quote it for PCRE2.
      regex = "\\Q" + pat["String"].get<std::string>() + "\\E";
    } else {
      fail("{}: Split pre-tokenizer without a \"Regex\" or \"String\" pattern", source);
    }
    if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false))
      fail("{}: Split pre-tokenizer behaviour \"{}\" (invert {}) is not supported (Isolated only)", source,
           p.value("behavior", std::string()), p.value("invert", false));
    pre.push_back({compile_regex(regex, source), false});
  } else if (type == "ByteLevel") {
    have_byte_level = true;
    PreStep s;
    s.add_prefix_space = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) s.regex = compile_regex(kGpt2Pattern, source);
    pre.push_back(s);
  } else {
    fail("{}: pre-tokenizer type \"{}\" is not supported (Split, ByteLevel, Sequence)", source, type);
  }
}

void Tokenizer::Impl::load(const json& j) {
  if (!j.is_object() || !j.contains("model")) fail("{}: no \"model\" object; not a tokenizer.json", source);
  const json& m = j["model"];
  if (json_type(m, source, "model") != "BPE")
    fail("{}: model type \"{}\" is not supported (BPE)", source, m["type"].get<std::string>());
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("{}: model.vocab is missing or not an object", source);
  for (const auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer()) fail("{}: model.vocab[\"{}\"] is not an integer id", source, tok);
    vocab[tok] = id.get<int32_t>();
    id_to_token[id.get<int32_t>()] = tok;
  }
  if (m.contains("byte_fallback") && m["byte_fallback"].is_boolean() && m["byte_fallback"].get<bool>())
    fail("{}: BPE byte_fallback is not supported", source);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = vocab.find(m["unk_token"].get<std::string>());
    if (it == vocab.end()) fail("{}: unk_token \"{}\" is not in the vocabulary", source, m["unk_token"].dump());
    unk_id = it->second;
  }

  if (!m.contains("merges") || !m["merges"].is_array()) fail("{}: model.merges is missing or not a list", source);
  int32_t rank = 0;
  for (const auto& e : m["merges"]) {
    std::string a, b;
    if (e.is_string()) {  // older files: "a b"
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail("{}: merge {} \"{}\" is not two symbols separated by one space", source, rank, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // newer: [a, b]
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail("{}: merge {} is neither an \"a b\" string nor an [a, b] pair: {}", source, rank, e.dump());
    }
    auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || im == vocab.end())
      fail("{}: merge {} ({} + {}) names a token missing from the vocabulary", source, rank, a, b);
    merges.emplace(pair_key(ia->second, ib->second), std::pair{rank, im->second});
    ++rank;
  }

  for (int b = 0; b < 256; ++b) {
    alphabet_inverse[alphabet[b]] = static_cast<uint8_t>(b);
    auto it = vocab.find(alphabet[b]);
    byte_id[b] = it == vocab.end() ? -1 : it->second;
  }

  if (j.contains("added_tokens")) {
    if (!j["added_tokens"].is_array()) fail("{}: added_tokens is not a list", source);
    for (const auto& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id") ||
          !t["id"].is_number_integer())
        fail("{}: an added token lacks a string \"content\" or an integer \"id\": {}", source, t.dump());
      AddedToken a{t["content"].get<std::string>(), t["id"].get<int32_t>(), t.value("lstrip", false),
                   t.value("rstrip", false)};
      if (a.content.empty()) fail("{}: added token {} has empty content", source, a.id);
      vocab[a.content] = a.id;
      id_to_token[a.id] = a.content;
      id_is_added[a.id] = true;
      added.push_back(std::move(a));
    }
    std::stable_sort(added.begin(), added.end(),
                     [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  }

  if (j.contains("normalizer")) load_normalizer(j["normalizer"]);
  bool have_byte_level = false;
  if (j.contains("pre_tokenizer")) load_pre_tokenizer(j["pre_tokenizer"], have_byte_level);
  if (!have_byte_level) fail("{}: no ByteLevel pre-tokenizer; only byte-level BPE is supported", source);
  if (j.contains("decoder") && !j["decoder"].is_null() && json_type(j["decoder"], source, "decoder") != "ByteLevel")
    fail("{}: decoder type \"{}\" is not supported (ByteLevel)", source, j["decoder"]["type"].get<std::string>());
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols in a doubly linked list (merged-away ones are marked dead) and a min-heap of candidate merges ordered by
  // (rank, position of the left symbol): O(n log n) for a piece of n bytes, where rescanning every pair after each
  // merge was O(n^2) (65,536 spaces took 27 s). The order of merges is Hugging Face's: the heap's top is taken
  // unless it is stale, i.e. its left symbol is dead or last, or the pair now there merges into a different id
  // (compared by merged id only, as Hugging Face does).
  struct Sym {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  struct Cand {
    int32_t rank, pos, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> sym;
  sym.reserve(piece.size());
  for (char c : piece) {
    int32_t id = byte_id[static_cast<unsigned char>(c)];
    if (id < 0) id = unk_id;
    if (id < 0) continue;  // dropped, as Hugging Face does for an unknown symbol without unk_token
    const auto i = static_cast<int32_t>(sym.size());
    sym.push_back({id, i - 1, i + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i)
    if (const auto* m = lookup(sym[i].id, sym[i + 1].id)) heap.push({m->first, i, m->second});
  while (!heap.empty()) {
    const Cand top = heap.top();
    heap.pop();
    Sym& left = sym[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    const int32_t right_pos = left.next;
    Sym& right = sym[static_cast<size_t>(right_pos)];
    const auto* now = lookup(left.id, right.id);
    if (!now || now->second != top.merged) continue;
    left.id = top.merged;
    left.next = right.next;
    right.alive = false;
    if (left.next >= 0) sym[static_cast<size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0)
      if (const auto* m = lookup(sym[static_cast<size_t>(left.prev)].id, left.id))
        heap.push({m->first, left.prev, m->second});
    if (left.next >= 0)
      if (const auto* m = lookup(left.id, sym[static_cast<size_t>(left.next)].id))
        heap.push({m->first, top.pos, m->second});
  }
  for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{nfc ? utf8_nfc(text, source) : std::string(text)};
  for (const auto& step : pre) {
    if (step.add_prefix_space && !pieces.empty() && !pieces.front().empty() && pieces.front()[0] != ' ')
      pieces.front().insert(0, 1, ' ');
    if (!step.regex) continue;
    std::vector<std::string> next;
    for (const auto& p : pieces) split_isolated(step.regex.get(), p, next);
    pieces.swap(next);
  }
  for (const auto& p : pieces) bpe(p, out);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json_text(const std::string& text, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  json j = parse_json(text, source);
  try {
    impl->load(j);
  } catch (const json::exception& e) {  // a field of the wrong type somewhere
    fail("{}: malformed tokenizer.json ({})", source, e.what());
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  // A regular file of at most 256 MiB (Qwen3-VL's is 11 MB): /dev/zero was read until memory ran out, a FIFO
  // blocked the open forever.
  return from_json_text(read_text_file_checked(path, "tokenizer file"), path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const Impl& m = *impl_;
  if (size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    fail("tokenizer ({}): input is not valid UTF-8 (byte {} of {}, value 0x{:02x}); pass UTF-8 text", m.source, bad,
         text.size(), static_cast<unsigned char>(text[bad]));
  std::vector<int32_t> out;
  // Cut the raw text at added tokens (leftmost, then longest); the spans between them go through the
  // pipeline.
  size_t plain_begin = 0, pos = 0;
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (const auto& a : m.added)
      if (text.compare(pos, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t plain_end = pos, after = pos + hit->content.size();
    if (hit->lstrip)
      while (plain_end > plain_begin && is_space_byte(text[plain_end - 1])) --plain_end;
    if (hit->rstrip)
      while (after < text.size() && is_space_byte(text[after])) ++after;
    m.encode_plain(text.substr(plain_begin, plain_end - plain_begin), out);
    out.push_back(hit->id);
    plain_begin = pos = after;
  }
  m.encode_plain(text.substr(plain_begin), out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& m = *impl_;
  std::string out;
  for (int32_t id : ids) {
    auto it = m.id_to_token.find(id);
    if (it == m.id_to_token.end()) fail("tokenizer ({}): decode: id {} is not in the vocabulary", m.source, id);
    if (m.id_is_added.count(id)) {
      out += it->second;
      continue;
    }
    const std::string& tok = it->second;
    for (size_t i = 0; i < tok.size();) {  // each character of the token is one byte of the alphabet
      size_t n = 1;
      while (i + n < tok.size() && (static_cast<unsigned char>(tok[i + n]) & 0xC0) == 0x80) ++n;
      auto b = m.alphabet_inverse.find(tok.substr(i, n));
      if (b == m.alphabet_inverse.end())
        out += tok.substr(i, n);  // not a byte-level character: keep as is
      else
        out += static_cast<char>(b->second);
      i += n;
    }
  }
  return out;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->vocab.find(std::string(token));
  return it == impl_->vocab.end() ? -1 : it->second;
}

size_t Tokenizer::vocab_size() const {
  return impl_->id_to_token.size();
}
const std::string& Tokenizer::source() const {
  return impl_->source;
}

}  // namespace h3
