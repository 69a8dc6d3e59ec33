// CheckpointReader — reads boxes of global tensors out of a sharded checkpoint (checkpoint.h),
// whatever layout wrote it: a box is assembled from every piece that overlaps it.
//
// Opening checks the manifest (present, valid JSON, format_version, the model section against
// the caller's when given) and that every data file it lists exists with the recorded size (a
// truncated or missing rank file is named). read() checks the tensor exists with the expected
// global shape, reads each overlapping piece once (bounds-checked against its file, CRC-32
// verified: a flipped bit names the file and the tensor) and fails unless the pieces cover the
// whole box. It writes only into the destination it is given: callers stage into scratch and
// commit after every read succeeded, so nothing is half-loaded. A recorded tokenizer file must
// exist with its recorded size; verify() reads every piece and the tokenizer once (streamed,
// nothing kept) and checks every checksum — what `--resume auto` does before it trusts a checkpoint.
#pragma once

#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "myriad/train/checkpoint/checkpoint.h"

namespace myriad::train {

class CheckpointReader {
 public:
  // `model_yaml` empty = do not compare the model section. Encrypted files are read with
  // `at_rest`'s keys (an encrypted checkpoint without them: an Error naming the key).
  CheckpointReader(const std::string& checkpoint_dir, const std::string& model_yaml, data::AtRest at_rest = {});
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const CheckpointHeader& header() const { return header_; }
  // <dir>/tokenizer.bpe when the manifest records a tokenizer, else "".
  std::string tokenizer_file() const;
  // Reads every piece of every tensor and the tokenizer file, checking bounds and CRC-32; throws
  // naming the file (and tensor) of the first damage.
  void verify() const;
  bool has(const std::string& tensor) const;
  // The global shape the manifest records for `tensor` (which must exist: has()).
  const Shape& global_shape(const std::string& tensor) const;
  // dest (f32, any strides) <- the box of `tensor`, whose global shape must be `global_shape`.
  void read(const std::string& tensor, const Shape& global_shape, const std::vector<nn::IndexRange>& box,
            const Tensor& dest);
  // The whole tensor.
  void read_whole(const std::string& tensor, const Tensor& dest);

 private:
  struct Piece;
  struct Entry;
  const Tensor& load_piece(const std::string& tensor, Piece& piece);
  data::StoredFileReader& file(const std::string& name);  // opened once, kept

  std::string dir_, manifest_path_;
  data::AtRest at_rest_;
  std::map<std::string, std::unique_ptr<data::StoredFileReader>> files_;
  std::set<std::string> authenticated_;  // encrypted files bound by the manifest's file_id: no CRC needed
  bool tokenizer_authenticated_ = false;
  CheckpointHeader header_;
  std::uint64_t tokenizer_bytes_ = 0;
  std::uint32_t tokenizer_crc32_ = 0;
  std::map<std::string, std::unique_ptr<Entry>> tensors_;
};

// "" when the checkpoint at `checkpoint_dir` opens and verify() passes, else what is wrong (the
// error's message, naming the file).
// A checkpoint encrypted under a key `at_rest` cannot unwrap is not damage: that throws.
std::string checkpoint_damage(const std::string& checkpoint_dir, const data::AtRest& at_rest = {});

// Reads the parameters (and, when m and v are defined, AdamW's moments) of `store`'s layout
// from `reader` into the flat buffers (the store's flat layout; every parameter, primary or not).
void read_parameter_state(CheckpointReader& reader, const nn::ParameterStore& store, Tensor& values, Tensor* m,
                          Tensor* v);
// The same for one per-parameter state saved under `prefix` (e.g. the local-SGD outer momentum).
void read_prefixed_state(CheckpointReader& reader, const nn::ParameterStore& store, const std::string& prefix,
                         Tensor& flat);

}  // namespace myriad::train
