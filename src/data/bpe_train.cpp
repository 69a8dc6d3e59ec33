// BpeTokenizer::train: byte-level BPE training (see bpe_tokenizer.h).
//
// Words = distinct pre-tokenised pieces with their counts (sorted by bytes, so nothing depends
// on hash-map order). Pair counts are kept incrementally: merging a pair re-counts only the
// words that contain it (found through per-pair word lists, which may hold stale entries). The
// best pair comes from a max-heap with lazy deletion: an entry is used only if its count is
// still the pair's current count. Ties go to the smallest (left id, right id).
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "myriad/core/error.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/pretokenize.h"
#include "bpe_pair_key.h"

namespace myriad::data {

namespace {

struct Word {
  std::vector<std::int32_t> symbols;
  std::int64_t count = 0;
  std::int64_t last_merge = -1;  // merge step that last re-counted this word
};

struct HeapEntry {
  std::int64_t count;
  std::uint64_t key;
  // priority_queue puts the "largest" on top: higher count, then smaller key.
  bool operator<(const HeapEntry& other) const { return count != other.count ? count < other.count : key > other.key; }
};

}  // namespace

BpeTokenizer BpeTokenizer::train(std::string_view text, std::int32_t vocab_size) {
  MYRIAD_CHECK(vocab_size >= 257, "BpeTokenizer::train: vocab_size "
                                      << vocab_size
                                      << " is too small: it needs 256 byte tokens plus the end-of-text token");
  std::unordered_map<std::string_view, std::int64_t> piece_counts;
  pretokenize_gpt2(text, [&](std::string_view piece) { ++piece_counts[piece]; });
  std::vector<std::pair<std::string_view, std::int64_t>> pieces(piece_counts.begin(), piece_counts.end());
  std::sort(pieces.begin(), pieces.end());

  std::vector<Word> words(pieces.size());
  std::unordered_map<std::uint64_t, std::int64_t> pair_count;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> pair_words;
  for (std::size_t w = 0; w < pieces.size(); ++w) {
    Word& word = words[w];
    word.count = pieces[w].second;
    for (char c : pieces[w].first) word.symbols.push_back(static_cast<unsigned char>(c));
    for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const std::uint64_t key = pair_key(word.symbols[i], word.symbols[i + 1]);
      pair_count[key] += word.count;
      std::vector<std::int32_t>& list = pair_words[key];
      if (list.empty() || list.back() != static_cast<std::int32_t>(w)) list.push_back(static_cast<std::int32_t>(w));
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  std::vector<std::string> tokens(256);
  std::unordered_map<std::string, std::int32_t> by_bytes;
  for (int b = 0; b < 256; ++b) {
    tokens[b] = std::string(1, static_cast<char>(b));
    by_bytes.emplace(tokens[b], b);
  }
  std::vector<Merge> merges;
  std::unordered_map<std::uint64_t, std::int64_t> touched;  // key -> count before this step
  std::vector<std::int32_t> merged;

  while (static_cast<std::int32_t>(tokens.size()) < vocab_size - 1) {
    while (!heap.empty()) {
      const HeapEntry top = heap.top();
      auto it = pair_count.find(top.key);
      if (it != pair_count.end() && it->second == top.count && top.count > 0) break;
      heap.pop();
    }
    if (heap.empty()) break;  // every piece is a single token
    const std::uint64_t best = heap.top().key;
    heap.pop();
    const auto left = static_cast<std::int32_t>(best >> 32), right = static_cast<std::int32_t>(best & 0xFFFFFFFFu);
    std::string bytes = tokens[left] + tokens[right];
    auto [found, inserted] = by_bytes.emplace(bytes, static_cast<std::int32_t>(tokens.size()));
    if (inserted) tokens.push_back(std::move(bytes));
    const std::int32_t result = found->second;
    const auto step = static_cast<std::int64_t>(merges.size());
    merges.push_back({left, right, result});

    touched.clear();
    const auto change = [&](std::uint64_t key, std::int64_t delta) {
      std::int64_t& count = pair_count[key];
      touched.emplace(key, count);
      count += delta;
    };
    const std::vector<std::int32_t> affected = std::move(pair_words[best]);
    pair_words.erase(best);
    for (std::int32_t w : affected) {
      Word& word = words[w];
      if (word.last_merge == step) continue;
      word.last_merge = step;
      std::vector<std::int32_t>& s = word.symbols;
      for (std::size_t i = 0; i + 1 < s.size(); ++i) change(pair_key(s[i], s[i + 1]), -word.count);
      merged.clear();
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          merged.push_back(result);
          ++i;
        } else {
          merged.push_back(s[i]);
        }
      }
      s.swap(merged);
      for (std::size_t i = 0; i + 1 < s.size(); ++i) {
        const std::uint64_t key = pair_key(s[i], s[i + 1]);
        change(key, word.count);
        if (s[i] == result || s[i + 1] == result) {
          std::vector<std::int32_t>& list = pair_words[key];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    for (const auto& [key, before] : touched) {
      auto it = pair_count.find(key);
      if (it->second == 0)
        pair_count.erase(it);
      else if (it->second != before)
        heap.push({it->second, key});
    }
  }
  const auto eot = static_cast<std::int32_t>(tokens.size());
  tokens.emplace_back("<|endoftext|>");
  Origin origin{"<trained>", "<trained>", 0, 0};
  return BpeTokenizer(std::move(tokens), std::move(merges), eot, origin);
}

}  // namespace myriad::data
