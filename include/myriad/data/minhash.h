// MinHash signatures and LSH banding — the near-duplicate machinery of `myriad-data dedup`.
//
// Shingles: word n-grams (words are maximal runs of non-whitespace bytes, ASCII letters
// lowercased) or byte n-grams of the text; a text shorter than one n-gram is a single shingle.
// Each shingle is hashed to 64 bits (FNV-1a then splitmix64). Permutation i maps a shingle hash x
// to the high 32 bits of a_i x + b_i (mod 2^64; multiply-shift hashing, a_i odd, a_i and b_i drawn
// from the seed); the signature holds, for each permutation, the smallest value over the text's
// shingles. Two texts' signatures agree at position i with probability equal to the Jaccard
// similarity J of their shingle sets (up to 32-bit collisions), so the fraction of equal
// positions estimates J with standard deviation sqrt(J (1 - J) / num_perm): 0.018 at J = 0.8 with
// the default 512, so verifying at 0.8 keeps 98.5 % of the pairs whose J is 0.84 (one word
// changed in 60), 99.9 % at 0.86; 256 permutations would keep only 94 % at 0.84.
// LSH: `bands` bands of `rows` consecutive positions; two texts become candidates when some band
// is equal in full, which happens with probability 1 - (1 - J^rows)^bands (the S-curve;
// lsh_candidate_probability).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace myriad::data {

struct MinHashOptions {
  int num_perm = 512;
  int bands = 20;
  int rows = 6;  // bands * rows <= num_perm (the rest only sharpen the Jaccard estimate); the
                 // S-curve: candidates with probability 0.08 at J = 0.4, 0.61 at 0.6, 0.998 at 0.8
  int ngram = 5;
  bool char_ngrams = false;  // byte n-grams instead of word n-grams
  std::uint64_t seed = 1;

  void validate() const;  // throws naming the bad option
};

class MinHasher {
 public:
  explicit MinHasher(const MinHashOptions& options);
  const MinHashOptions& options() const { return options_; }
  // The text's shingle hashes (sorted, distinct).
  std::vector<std::uint64_t> shingles(std::string_view text) const;
  // num_perm values.
  std::vector<std::uint32_t> signature(std::string_view text) const;
  // 64-bit key of band b of a signature (its rows hashed with the band number).
  std::uint64_t band_key(const std::uint32_t* signature, int band) const;

 private:
  MinHashOptions options_;
  std::vector<std::uint64_t> a_, b_;
};

// Fraction of equal positions of two signatures of `n` values.
double estimated_jaccard(const std::uint32_t* a, const std::uint32_t* b, int n);
// |A ∩ B| / |A ∪ B| of two sorted, distinct hash lists (1 for two empty lists).
double exact_jaccard(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b);
// 1 - (1 - j^rows)^bands.
double lsh_candidate_probability(double jaccard, int bands, int rows);

}  // namespace myriad::data
