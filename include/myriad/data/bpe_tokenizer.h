// Byte-level BPE tokenizer, compatible with GPT-2 (same pieces, same merges, same ids).
//
// encode(text):
//   1. split text into pieces with GPT-2's pre-tokenisation regex (data/pretokenize.h);
//   2. map each byte of a piece to its byte token, then repeatedly merge the adjacent pair of
//      lowest rank (leftmost first) until no adjacent pair has a merge — GPT-2's bpe() exactly
//      (merging one occurrence at a time, leftmost first, equals merging all occurrences of the
//      best pair at once because ranks are unique).
//   Text is raw bytes: invalid UTF-8 is allowed and encoded byte by byte (each invalid byte is an
//   "other" character for pre-tokenisation), so decode(encode(s)) == s for every byte string.
//   "<|endoftext|>" inside `text` is NOT special: it is encoded as ordinary text ("<|",
//   "endoftext", "|>"), so text from users or corpora cannot forge a document boundary. Callers
//   put eot_id() between documents themselves, or call encode_allowing_special(text), which maps
//   each literal "<|endoftext|>" to eot_id() (Hugging Face's GPT-2 tokenizer default; tiktoken's
//   allowed_special) and encodes the text between them as encode() does.
//   encode is const and keeps no state between calls: several threads may call it at once.
//   Merges are looked up in an open-addressing hash table keyed by (left id, right id). Two
//   shortcuts that never change the result: a read-only table of the tokens that BPE encodes as
//   themselves (most pieces of real text are one such token), and a per-call memo of pieces.
//
// decode(ids): concatenation of the tokens' bytes (eot decodes to the bytes "<|endoftext|>");
// throws myriad::Error naming the id and its position when an id is out of range.
//
// Vocabulary: token ids 0..vocab_size()-1, each with a unique non-empty byte string; every one
// of the 256 single bytes is a token; eot_id() is the special end-of-text token, never produced
// by encode. A merge (left, right) of rank r produces the token whose bytes are
// bytes(left) + bytes(right).
//
// Files:
//   load_gpt2: OpenAI's encoder.json ({"token string": id}, token strings written with the
//     byte->Unicode map of data/byte_unicode.h; must hold "<|endoftext|>") and vocab.bpe (an
//     optional "#version" first line, then one merge "left right" per line, rank = order).
//   save / load: myriad's own text format, version 1:
//       myriad-bpe 1
//       tokens <N>
//       eot <id>
//       merges <M>
//       <N lines: the bytes of token 0, 1, ... in lower-case hex>
//       <M lines: "<left id> <right id>", in rank order>
//     Trailing '\n' after the last line. The result of each merge is found from the bytes.
//   Every reading error (missing file, malformed JSON or line, unknown token, duplicate) throws
//   myriad::Error whose message() starts with "<path>:<line>:" (or "<path>:" when no line
//   applies); what() adds the usual "[rank N] source:line:" prefix in front.
//
// train(text, vocab_size): classic BPE training on the pre-tokenised `text`: start from the 256
// byte tokens (id = byte value), repeatedly merge the most frequent adjacent pair inside
// pieces (ties: smallest (left id, right id)), until vocab_size - 1 tokens exist, then add
// "<|endoftext|>" as the last id. Stops early (smaller vocabulary) when no pair is left.
// Deterministic: the result depends only on (text, vocab_size).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "myriad/data/at_rest.h"

namespace myriad::data {

class BpeTokenizer {
 public:
  static BpeTokenizer load_gpt2(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  // load/save: the file through `at_rest` (clear, or encrypted under its keys: data/at_rest.h).
  static BpeTokenizer load(const std::string& path, const AtRest& at_rest = {});
  void save(const std::string& path, const AtRest& at_rest = {}) const;
  // The saved format as text; `source` names it in errors.
  static BpeTokenizer from_text(const std::string& text, const std::string& source);
  std::string to_text() const;
  static BpeTokenizer train(std::string_view text, std::int32_t vocab_size);

  std::vector<std::int32_t> encode(std::string_view text) const;
  std::vector<std::int32_t> encode_allowing_special(std::string_view text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;
  std::int32_t vocab_size() const { return static_cast<std::int32_t>(tokens_.size()); }
  std::int32_t eot_id() const { return eot_id_; }

  // Encodes one piece without pre-tokenising it (pure BPE on its bytes); appends to `out`.
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
  // Raw bytes of token `id`; throws if out of range.
  const std::string& token_bytes(std::int32_t id) const;
  std::int32_t num_merges() const { return static_cast<std::int32_t>(merges_.size()); }

  struct Merge {
    std::int32_t left = 0, right = 0, result = 0;
  };
  const std::vector<Merge>& merges() const { return merges_; }  // by rank

 private:
  // Where tokens and merges came from, for error messages: token id i sits on line
  // token_line_base + i of tokens_path and merge rank r on line merge_line_base + r of
  // merges_path (a base of 0: no line numbers).
  struct Origin {
    std::string tokens_path, merges_path;
    std::int64_t token_line_base = 0, merge_line_base = 0;
  };
  // Validates (ids in range, unique non-empty bytes, every single byte a token, merge results
  // are tokens, no repeated merge), sets each merge's result and builds the lookup tables.
  BpeTokenizer(std::vector<std::string> tokens, std::vector<Merge> merges, std::int32_t eot_id, const Origin& origin);

  struct MergeSlot {
    std::uint64_t key = ~std::uint64_t{0};  // (left << 32) | right; all ones = empty
    std::int32_t rank = 0;
    std::int32_t result = 0;
  };
  // Rank and result of merging (left, right); false when there is no such merge.
  bool find_merge(std::int32_t left, std::int32_t right, std::int32_t& rank, std::int32_t& result) const;
  void encode_long_piece(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::vector<std::string> tokens_;
  std::vector<Merge> merges_;
  std::array<std::int32_t, 256> byte_ids_{};
  std::int32_t eot_id_ = -1;
  std::vector<MergeSlot> slots_;  // power-of-two size, at most half full
  int slot_shift_ = 64;           // 64 - log2(slots_.size())
  // Tokens of 2..16 bytes that BPE encodes as themselves (checked at construction by running
  // encode_piece on each token): a piece with these bytes is that one token. Keys are the bytes
  // packed into two little-endian words, zero padded. Open addressing, at most half full.
  struct WholeSlot {
    std::uint64_t lo = 0, hi = 0;
    std::uint32_t length = 0;  // 0 = empty
    std::int32_t id = 0;
  };
  std::vector<WholeSlot> whole_slots_;
};

// A saved tokenizer named by a spec's kind and argument: "gpt2" + a directory holding
// encoder.json and vocab.bpe, or "bpe" + a file written by save(). Other kinds throw naming them
// ("train" needs a corpus: call BpeTokenizer::train).
BpeTokenizer load_tokenizer(std::string_view kind, const std::string& argument, const AtRest& at_rest = {});

// The two files of a GPT-2 tokenizer folder: encoder.json + vocab.bpe (OpenAI's names) or, where
// encoder.json is absent, vocab.json + merges.txt (Hugging Face's names for the same formats).
std::pair<std::string, std::string> gpt2_tokenizer_files(const std::string& dir);

}  // namespace myriad::data
