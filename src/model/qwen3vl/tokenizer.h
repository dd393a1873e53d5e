// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the Qwen2 format): added/special tokens
// are cut out of the raw text first, every other piece is NFC-normalised (utf8proc), split by the
// pre-tokenizer regex (PCRE2, Unicode classes and look-ahead), mapped byte by byte onto the GPT-2 printable
// alphabet and merged by BPE rank. Supported components (anything else is an error naming the file):
// normalizer null/NFC/Sequence of NFC; pre_tokenizer Split(Regex, Isolated)/ByteLevel/Sequence of those;
// model BPE (merges as "a b" strings or [a, b] pairs); decoder ByteLevel.
//
// Added tokens are matched on the raw text (leftmost, then longest), honouring lstrip/rstrip. Not implemented:
// "single_word", and matching normalized=true added tokens after normalisation (Qwen's are all
// normalized=false).
//
// Input text must be valid UTF-8: encode() throws h3::Error naming the first bad byte offset (a prompt that
// is not text is a bad request, not something to guess about).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace h3 {

class Tokenizer {
 public:
  // Reads and validates `path`; throws h3::Error naming the file on malformed JSON or unsupported components.
  static Tokenizer from_file(const std::string& path);
  // Same from the JSON text; `source` names it in errors.
  static Tokenizer from_json_text(const std::string& text, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` without any template or special tokens added (add_special_tokens=False). Special
  // tokens written literally in the text ("<|image_pad|>") are recognised.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes the ids stand for (added tokens verbatim). Not re-validated as UTF-8: a prefix of a multi-byte
  // character decodes to its raw bytes.
  std::string decode(const std::vector<int32_t>& ids) const;
  // Id of a vocabulary or added token, or -1.
  int32_t token_to_id(std::string_view token) const;
  // Number of distinct ids (model vocabulary plus added tokens).
  size_t vocab_size() const;
  const std::string& source() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// NFC normalisation of UTF-8 text; throws h3::Error (mentioning `what`) when the input is not valid UTF-8.
std::string utf8_nfc(std::string_view text, const std::string& what);

}  // namespace h3
