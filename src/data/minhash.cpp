// MinHash signatures, band keys and Jaccard estimates (see minhash.h).
#include "myriad/data/minhash.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "myriad/core/error.h"
#include "fnv1a.h"

namespace myriad::data {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

void MinHashOptions::validate() const {
  MYRIAD_CHECK(num_perm >= 1 && num_perm <= 4096, "num_perm " << num_perm << " must lie in [1, 4096]");
  MYRIAD_CHECK(
      bands >= 1 && rows >= 1 && bands * rows <= num_perm,
      "bands (" << bands << ") x rows (" << rows << ") must be at least 1 and at most num_perm (" << num_perm << ")");
  MYRIAD_CHECK(ngram >= 1, "ngram " << ngram << " must be at least 1");
}

MinHasher::MinHasher(const MinHashOptions& options) : options_(options) {
  options_.validate();
  std::uint64_t state = splitmix64(options.seed ^ 0x4D494E48415348ull);
  for (int i = 0; i < options_.num_perm; ++i) {
    state = splitmix64(state);
    a_.push_back(state | 1u);  // odd multipliers
    state = splitmix64(state);
    b_.push_back(state);
  }
}

std::vector<std::uint64_t> MinHasher::shingles(std::string_view text) const {
  std::vector<std::uint64_t> out;
  const auto n = static_cast<std::size_t>(options_.ngram);
  if (options_.char_ngrams) {
    if (text.size() <= n) {
      out.push_back(splitmix64(fnv1a(text)));
    } else {
      for (std::size_t i = 0; i + n <= text.size(); ++i) out.push_back(splitmix64(fnv1a(text.substr(i, n))));
    }
  } else {
    std::vector<std::uint64_t> words;
    std::size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) ++i;
      if (i >= text.size()) break;
      std::uint64_t hash = 0xcbf29ce484222325ull;
      for (; i < text.size() && !is_space(static_cast<unsigned char>(text[i])); ++i) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c >= 'A' && c <= 'Z') c = static_cast<unsigned char>(c - 'A' + 'a');
        hash = (hash ^ c) * 0x100000001b3ull;
      }
      words.push_back(hash);
    }
    if (words.size() <= n) {
      std::uint64_t hash = 0;
      for (std::uint64_t w : words) hash = splitmix64(hash ^ w);
      out.push_back(hash);
    } else {
      for (std::size_t w = 0; w + n <= words.size(); ++w) {
        std::uint64_t hash = 0;
        for (std::size_t k = 0; k < n; ++k) hash = splitmix64(hash ^ words[w + k]);
        out.push_back(hash);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::uint32_t> MinHasher::signature(std::string_view text) const {
  const std::vector<std::uint64_t> hashes = shingles(text);
  std::vector<std::uint32_t> out(static_cast<std::size_t>(options_.num_perm));
  for (int i = 0; i < options_.num_perm; ++i) {
    // Multiply-shift hashing: the high 32 bits of a x + b (mod 2^64), a odd; one multiply per
    // shingle and permutation, and the loop vectorises.
    std::uint32_t smallest = std::numeric_limits<std::uint32_t>::max();
    const std::uint64_t a = a_[static_cast<std::size_t>(i)], b = b_[static_cast<std::size_t>(i)];
    for (std::uint64_t x : hashes) smallest = std::min(smallest, static_cast<std::uint32_t>((a * x + b) >> 32));
    out[static_cast<std::size_t>(i)] = smallest;
  }
  return out;
}

std::uint64_t MinHasher::band_key(const std::uint32_t* signature, int band) const {
  std::uint64_t hash = splitmix64(static_cast<std::uint64_t>(band) + 0x42414E44ull);
  for (int r = 0; r < options_.rows; ++r) hash = splitmix64(hash ^ signature[band * options_.rows + r]);
  return hash;
}

double estimated_jaccard(const std::uint32_t* a, const std::uint32_t* b, int n) {
  int equal = 0;
  for (int i = 0; i < n; ++i) equal += a[i] == b[i];
  return n > 0 ? static_cast<double>(equal) / n : 0.0;
}

double exact_jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  std::size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++common, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(common) / static_cast<double>(a.size() + b.size() - common);
}

double lsh_candidate_probability(double jaccard, int bands, int rows) {
  return 1.0 - std::pow(1.0 - std::pow(jaccard, rows), bands);
}

}  // namespace myriad::data
