// BpeTokenizer core: construction / validation, the merge hash table, encode and decode.
// File reading and writing live in bpe_tokenizer_io.cpp, training in bpe_train.cpp.
//
// Invariants after construction: tokens_ hold unique non-empty byte strings; byte_ids_[b] is
// the token of the single byte b; each merge's result is the token of bytes(left)+bytes(right);
// slots_ maps (left, right) -> (rank, result) for every merge; whole_slots_ holds exactly the
// tokens t of 2..16 bytes with encode_piece(bytes(t)) == {t}. Neither is written after
// construction (encode's memo is local to each call), so encode/decode are safe to call
// concurrently.
#include "myriad/data/bpe_tokenizer.h"

#include <cstring>
#include <limits>
#include <queue>
#include <unordered_map>

#include "myriad/core/error.h"
#include "myriad/data/pretokenize.h"
#include "bpe_pair_key.h"

namespace myriad::data {

namespace {

constexpr std::int32_t kNoRank = std::numeric_limits<std::int32_t>::max();
// Pieces up to this many bytes use the array algorithm (a linear scan per merge); longer ones
// use a heap over a linked list (n log n).
constexpr std::size_t kShortPiece = 64;

std::string location(const std::string& path, std::int64_t line) {
  return line > 0 ? path + ":" + std::to_string(line) + ":" : path + ":";
}

// Pieces of 2..kMaxKey bytes packed into two little-endian words (zero padded) plus the length,
// so a hash probe is two compares and no pointer chase.
constexpr std::size_t kMaxKey = 16;

struct PieceKey {
  std::uint64_t lo = 0, hi = 0;
  std::uint32_t length = 0;

  explicit PieceKey(std::string_view piece) {  // piece.size() <= kMaxKey
    char buffer[kMaxKey] = {};
    if (!piece.empty()) std::memcpy(buffer, piece.data(), piece.size());  // an empty view's data() may be null
    std::memcpy(&lo, buffer, 8);
    std::memcpy(&hi, buffer + 8, 8);
    length = static_cast<std::uint32_t>(piece.size());
  }
  // Every key bit reaches the low bits that index the tables (splitmix64's finaliser twice).
  std::uint64_t hash() const { return mix(lo ^ mix(hi ^ length)); }
  static std::uint64_t mix(std::uint64_t h) {
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
  }
};

// Per-call memo of piece -> ids for one encode() call (words repeat a lot in real text), for
// pieces of at most kMaxKey bytes. It lives inside one encode() call and is never shared
// between threads. Stops inserting past kMaxEntries (memory stays bounded).
class PieceCache {
 public:
  static constexpr std::size_t kMaxEntries = std::size_t{1} << 18;

  // Ids of `key` if cached: [begin, end) in ids().
  bool find(const PieceKey& key, std::uint64_t hash, std::uint32_t& begin, std::uint32_t& end) const {
    if (slots_.empty()) return false;
    for (std::size_t slot = hash & mask_;; slot = (slot + 1) & mask_) {
      const Slot& s = slots_[slot];
      if (s.key.length == 0) return false;
      if (s.key.lo == key.lo && s.key.hi == key.hi && s.key.length == key.length) {
        begin = s.begin;
        end = s.end;
        return true;
      }
    }
  }
  void insert(const PieceKey& key, std::uint64_t hash, const std::int32_t* ids, std::size_t count) {
    if (used_ >= kMaxEntries) return;
    if ((used_ + 1) * 2 > slots_.size()) grow();
    std::size_t slot = hash & mask_;
    while (slots_[slot].key.length != 0) slot = (slot + 1) & mask_;
    slots_[slot] = Slot{key, static_cast<std::uint32_t>(ids_.size()), static_cast<std::uint32_t>(ids_.size() + count)};
    ids_.insert(ids_.end(), ids, ids + count);
    ++used_;
  }
  const std::int32_t* ids() const { return ids_.data(); }

 private:
  struct Slot {
    PieceKey key{std::string_view()};  // length 0 = empty
    std::uint32_t begin = 0, end = 0;
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key.length == 0) continue;
      std::size_t slot = s.key.hash() & mask_;
      while (slots_[slot].key.length != 0) slot = (slot + 1) & mask_;
      slots_[slot] = s;
    }
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, used_ = 0;
  std::vector<std::int32_t> ids_;  // at most kMaxEntries * kMaxKey ids: fits uint32 offsets
};

}  // namespace

BpeTokenizer::BpeTokenizer(std::vector<std::string> tokens, std::vector<Merge> merges, std::int32_t eot_id,
                           const Origin& origin)
    : tokens_(std::move(tokens)), merges_(std::move(merges)), eot_id_(eot_id) {
  const auto token_where = [&](std::int64_t id) {
    return location(origin.tokens_path, origin.token_line_base > 0 ? origin.token_line_base + id : 0);
  };
  const auto merge_where = [&](std::int64_t rank) {
    return location(origin.merges_path, origin.merge_line_base > 0 ? origin.merge_line_base + rank : 0);
  };
  const std::int64_t n = static_cast<std::int64_t>(tokens_.size());
  MYRIAD_CHECK(n >= 257 && n < std::numeric_limits<std::int32_t>::max(),
               location(origin.tokens_path, 0)
                   << " a vocabulary needs the 256 byte tokens and an end-of-text token, got " << n << " tokens");
  MYRIAD_CHECK(eot_id_ >= 0 && eot_id_ < n, location(origin.tokens_path, 0)
                                                << " end-of-text id " << eot_id_ << " out of range [0, " << n << ")");

  std::unordered_map<std::string_view, std::int32_t> by_bytes;
  by_bytes.reserve(tokens_.size() * 2);
  for (std::int64_t id = 0; id < n; ++id) {
    const std::string& bytes = tokens_[id];
    MYRIAD_CHECK(!bytes.empty(), token_where(id) << " token " << id << " is empty");
    auto [it, inserted] = by_bytes.emplace(bytes, static_cast<std::int32_t>(id));
    MYRIAD_CHECK(inserted, token_where(id) << " token " << id << " has the same bytes as token " << it->second);
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    auto it = by_bytes.find(std::string_view(&byte, 1));
    MYRIAD_CHECK(it != by_bytes.end() && it->second != eot_id_, location(origin.tokens_path, 0)
                                                                    << " no token for the single byte " << b);
    byte_ids_[b] = it->second;
  }

  std::size_t slots = 16;
  while (slots < merges_.size() * 2) slots *= 2;
  slots_.assign(slots, MergeSlot{});
  slot_shift_ = 64;
  for (std::size_t s = slots; s > 1; s >>= 1) --slot_shift_;
  const std::size_t mask = slots - 1;
  std::string joined;
  for (std::size_t rank = 0; rank < merges_.size(); ++rank) {
    Merge& m = merges_[rank];
    const auto r = static_cast<std::int64_t>(rank);
    MYRIAD_CHECK(m.left >= 0 && m.left < n && m.right >= 0 && m.right < n,
                 merge_where(r) << " merge " << rank << " refers to token "
                                << (m.left >= 0 && m.left < n ? m.right : m.left) << " outside [0, " << n << ")");
    MYRIAD_CHECK(m.left != eot_id_ && m.right != eot_id_, merge_where(r)
                                                              << " merge " << rank << " uses the end-of-text token");
    joined = tokens_[m.left];
    joined += tokens_[m.right];
    auto it = by_bytes.find(joined);
    MYRIAD_CHECK(it != by_bytes.end() && it->second != eot_id_,
                 merge_where(r) << " merge " << rank << " (" << m.left << ", " << m.right
                                << ") produces bytes that are not a token");
    m.result = it->second;
    const std::uint64_t key = pair_key(m.left, m.right);
    std::size_t slot = static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> slot_shift_);
    while (slots_[slot].key != ~std::uint64_t{0}) {
      MYRIAD_CHECK(slots_[slot].key != key, merge_where(r) << " merge " << rank << " (" << m.left << ", " << m.right
                                                           << ") repeats merge " << slots_[slot].rank);
      slot = (slot + 1) & mask;
    }
    slots_[slot] = MergeSlot{key, static_cast<std::int32_t>(rank), m.result};
  }

  // Whole-token table (needs the merge table above: it runs BPE on every token).
  std::size_t whole = 16;
  while (whole < tokens_.size() * 2) whole *= 2;
  whole_slots_.assign(whole, WholeSlot{});
  std::vector<std::int32_t> ids;
  for (std::int64_t id = 0; id < n; ++id) {
    const std::string& bytes = tokens_[id];
    if (id == eot_id_ || bytes.size() < 2 || bytes.size() > kMaxKey) continue;
    ids.clear();
    encode_piece(bytes, ids);
    if (ids.size() != 1 || ids[0] != id) continue;
    const PieceKey key(bytes);
    std::size_t slot = key.hash() & (whole - 1);
    while (whole_slots_[slot].length != 0) slot = (slot + 1) & (whole - 1);
    whole_slots_[slot] = WholeSlot{key.lo, key.hi, key.length, static_cast<std::int32_t>(id)};
  }
}

bool BpeTokenizer::find_merge(std::int32_t left, std::int32_t right, std::int32_t& rank, std::int32_t& result) const {
  const std::uint64_t key = pair_key(left, right);
  const std::size_t mask = slots_.size() - 1;
  std::size_t slot = static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> slot_shift_);
  while (true) {
    const MergeSlot& s = slots_[slot];
    if (s.key == key) {
      rank = s.rank;
      result = s.result;
      return true;
    }
    if (s.key == ~std::uint64_t{0}) return false;
    slot = (slot + 1) & mask;
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  const std::size_t n0 = piece.size();
  if (n0 == 0) return;
  if (n0 == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (n0 > kShortPiece) {
    encode_long_piece(piece, out);
    return;
  }
  // ids[i] = symbol i; rank[i] / result[i] = the merge of (ids[i], ids[i + 1]).
  std::int32_t ids[kShortPiece], rank[kShortPiece], result[kShortPiece];
  std::size_t n = n0;
  for (std::size_t i = 0; i < n; ++i) ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  const auto update = [&](std::size_t i) {
    if (!find_merge(ids[i], ids[i + 1], rank[i], result[i])) rank[i] = kNoRank;
  };
  for (std::size_t i = 0; i + 1 < n; ++i) update(i);
  while (n > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;  // strict: the leftmost of equal ranks
    if (rank[best] == kNoRank) break;
    ids[best] = result[best];
    for (std::size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      result[i] = result[i + 1];
    }
    --n;
    if (best > 0) update(best - 1);
    if (best + 1 < n) update(best);
  }
  out.insert(out.end(), ids, ids + n);
}

void BpeTokenizer::encode_long_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  // Doubly linked list of symbols indexed by their first byte; a min-heap of (rank, position)
  // with lazy deletion. An entry is live if its left symbol still exists, has a right
  // neighbour, and that pair still has this rank (ranks are unique, so the pair is the same).
  const auto n = static_cast<std::int32_t>(piece.size());
  std::vector<std::int32_t> ids(n), next(n), prev(n);
  std::vector<char> alive(n, 1);
  for (std::int32_t i = 0; i < n; ++i) {
    ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  using Entry = std::pair<std::int32_t, std::int32_t>;  // (rank, left position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  std::int32_t rank = 0, result = 0;
  for (std::int32_t i = 0; i + 1 < n; ++i)
    if (find_merge(ids[i], ids[i + 1], rank, result)) heap.emplace(rank, i);
  while (!heap.empty()) {
    const auto [entry_rank, pos] = heap.top();
    heap.pop();
    if (!alive[pos] || next[pos] < 0) continue;
    const std::int32_t right = next[pos];
    if (!find_merge(ids[pos], ids[right], rank, result) || rank != entry_rank) continue;
    ids[pos] = result;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    if (prev[pos] >= 0 && find_merge(ids[prev[pos]], ids[pos], rank, result)) heap.emplace(rank, prev[pos]);
    if (next[pos] >= 0 && find_merge(ids[pos], ids[next[pos]], rank, result)) heap.emplace(rank, pos);
  }
  for (std::int32_t i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

std::vector<std::int32_t> BpeTokenizer::encode_allowing_special(std::string_view text) const {
  constexpr std::string_view kSpecial = "<|endoftext|>";
  std::vector<std::int32_t> out;
  while (true) {
    const std::size_t at = text.find(kSpecial);
    const std::vector<std::int32_t> piece = encode(text.substr(0, at));
    out.insert(out.end(), piece.begin(), piece.end());
    if (at == std::string_view::npos) return out;
    out.push_back(eot_id_);
    text.remove_prefix(at + kSpecial.size());
  }
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 16);
  PieceCache cache;
  const std::size_t whole_mask = whole_slots_.size() - 1;
  pretokenize_gpt2(text, [&](std::string_view piece) {
    if (piece.size() == 1) {
      out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (piece.size() > kMaxKey) {
      encode_piece(piece, out);
      return;
    }
    const PieceKey key(piece);
    const std::uint64_t hash = key.hash();
    for (std::size_t slot = hash & whole_mask;; slot = (slot + 1) & whole_mask) {
      const WholeSlot& s = whole_slots_[slot];
      if (s.length == 0) break;
      if (s.lo == key.lo && s.hi == key.hi && s.length == key.length) {
        out.push_back(s.id);
        return;
      }
    }
    std::uint32_t begin = 0, end = 0;
    if (cache.find(key, hash, begin, end)) {
      out.insert(out.end(), cache.ids() + begin, cache.ids() + end);
      return;
    }
    const std::size_t start = out.size();
    encode_piece(piece, out);
    cache.insert(key, hash, out.data() + start, out.size() - start);
  });
  return out;
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  const auto n = static_cast<std::int32_t>(tokens_.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    MYRIAD_CHECK(id >= 0 && id < n, "BpeTokenizer::decode: id " << id << " at position " << i
                                                                << " is outside the vocabulary [0, " << n << ")");
    text += tokens_[id];
  }
  return text;
}

const std::string& BpeTokenizer::token_bytes(std::int32_t id) const {
  MYRIAD_CHECK(id >= 0 && id < vocab_size(),
               "BpeTokenizer::token_bytes: id " << id << " is outside the vocabulary [0, " << vocab_size() << ")");
  return tokens_[id];
}

}  // namespace myriad::data
