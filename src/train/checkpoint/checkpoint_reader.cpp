// CheckpointReader: manifest checks, bounds-checked and checksummed piece reads, box assembly.
#include "myriad/train/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <fstream>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>

#include "json_whole_number.h"
#include "myriad/data/token_shard.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace myriad::train {

namespace {

// The data file `name` of the checkpoint folder `dir`: a plain file name (no folder part, not "."
// or "..") whose real path, symlinks resolved, is inside the folder — a manifest cannot make the
// reader open any other file the user can read.
fs::path checkpoint_data_file(const std::string& dir, const std::string& name, const std::string& manifest) {
  const fs::path relative(name);
  MYRIAD_CHECK(!name.empty() && relative.is_relative() && relative.has_filename() && relative.parent_path().empty() &&
                   name != "." && name != "..",
               "checkpoint: " << manifest << " lists the data file '" << excerpt(name)
                              << "', which is not a file name inside the checkpoint folder (a path outside it, or a "
                                 "folder part): refusing to read it");
  const fs::path path = fs::path(dir) / relative;
  std::error_code missing, unreadable_folder;
  const fs::path real = fs::canonical(path, missing), folder = fs::canonical(dir, unreadable_folder);
  // A missing file is reported by the caller ("is missing"); an existing one must resolve inside.
  MYRIAD_CHECK(missing || unreadable_folder || real.parent_path() == folder,
               "checkpoint: data file " << path.string() << " listed in " << manifest << " resolves to "
                                        << real.string() << ", outside the checkpoint folder " << folder.string()
                                        << " (a symbolic link out of it): refusing to read it");
  return path;
}

// An encrypted file recorded by the manifest under `file_id` must be that file (not another one
// encrypted under the same key, not a clear one).
void bind_file(const data::StoredFileReader& reader, const std::string& file_id, const std::string& path,
               const std::string& manifest) {
  MYRIAD_CHECK(reader.encrypted() && reader.file_id() == file_id,
               "checkpoint: " << path << " is not the file " << manifest << " records ("
                              << (reader.encrypted() ? "another encrypted file" : "a file in clear")
                              << " stands in its place): replaced or copied from another checkpoint");
}

}  // namespace

struct CheckpointReader::Piece {
  std::string file;
  std::vector<nn::IndexRange> box;
  std::uint64_t offset = 0, bytes = 0;
  std::uint32_t crc32 = 0;
  Tensor data;  // read and verified on first use
};

struct CheckpointReader::Entry {
  Shape shape;
  std::vector<Piece> pieces;
};

CheckpointReader::CheckpointReader(const std::string& checkpoint_dir, const std::string& model_yaml,
                                   data::AtRest at_rest)
    : dir_(checkpoint_dir),
      manifest_path_((fs::path(checkpoint_dir) / "manifest.json").string()),
      at_rest_(std::move(at_rest)) {
  MYRIAD_CHECK(fs::exists(manifest_path_), "checkpoint: " << manifest_path_ << " not found");
  json manifest;
  const std::string manifest_text = at_rest_.read_all(manifest_path_);
  try {
    manifest = json::parse(manifest_text);
  } catch (const json::exception& e) {
    MYRIAD_THROW("checkpoint: " << manifest_path_ << " is not valid JSON: " << e.what());
  }
  const json version_field = manifest.is_object() ? manifest.value("format_version", json(-1)) : json(-1);
  MYRIAD_CHECK(version_field.is_number_integer(),
               "checkpoint: " << manifest_path_ << " has format_version " << version_field.dump()
                              << ", which is not a whole number (this build reads " << kCheckpointFormatVersion << ")");
  const int version = version_field.get<int>();
  MYRIAD_CHECK(version <= kCheckpointFormatVersion, "checkpoint: " << manifest_path_ << " has format_version "
                                                                   << version << ", newer than this build reads ("
                                                                   << kCheckpointFormatVersion
                                                                   << "); use a newer myriad");
  MYRIAD_CHECK(version == kCheckpointFormatVersion,
               "checkpoint: " << manifest_path_ << " has format_version " << version << "; this build reads "
                              << kCheckpointFormatVersion << " (sharded checkpoints)");
  // Each integer field, checked (json_whole_number.h), named with the manifest's path.
  const auto field = [&](const std::string& key) { return "checkpoint: " + manifest_path_ + ": '" + key + "'"; };
  try {
    header_.step = whole_number<std::int64_t>(manifest.at("step"), field("step"));
    header_.config_yaml = manifest.at("config");
    header_.model_yaml = manifest.at("model");
    header_.layout = manifest.value("layout", "");
    header_.seed = whole_number<std::uint64_t>(manifest.at("rng").at("seed"), field("rng.seed"));
    header_.samples_consumed = whole_number<std::int64_t>(manifest.at("data_cursor").at("samples_consumed"),
                                                          field("data_cursor.samples_consumed"));
    header_.optimizer_steps =
        whole_number<std::int64_t>(manifest.at("optimizer").at("adamw_steps"), field("optimizer.adamw_steps"));
    if (manifest.contains("loss_scaler")) {
      header_.loss_scale = manifest.at("loss_scaler").at("scale");
      header_.loss_scale_finite_steps =
          whole_number<std::int64_t>(manifest.at("loss_scaler").at("finite_steps"), field("loss_scaler.finite_steps"));
    }
    MYRIAD_CHECK(header_.step >= 0 && header_.samples_consumed >= 0 && header_.optimizer_steps >= 0,
                 "checkpoint: " << manifest_path_
                                << " records a negative step, data cursor or optimizer step count (step "
                                << header_.step << ", samples_consumed " << header_.samples_consumed << ", adamw_steps "
                                << header_.optimizer_steps << ")");
    if (manifest.contains("cpu_gemm_plan")) {
      MYRIAD_CHECK(manifest.at("cpu_gemm_plan").is_string(),
                   "checkpoint: " << manifest_path_ << "'s cpu_gemm_plan is not a string");
      header_.cpu_gemm_plan = manifest.at("cpu_gemm_plan").get<std::string>();
    }
    if (manifest.contains("tokenizer")) {
      const json& t = manifest.at("tokenizer");
      header_.tokenizer_fingerprint = t.at("fingerprint");
      header_.tokenizer_vocab_size = whole_number<std::int64_t>(t.at("vocab_size"), field("tokenizer.vocab_size"));
      tokenizer_bytes_ = whole_number<std::uint64_t>(t.at("bytes"), field("tokenizer.bytes"));
      tokenizer_crc32_ = whole_number<std::uint32_t>(t.at("crc32"), field("tokenizer.crc32"));
      MYRIAD_CHECK(t.at("file").get<std::string>() == kCheckpointTokenizerFile,
                   "checkpoint: " << manifest_path_ << " names the tokenizer file '" << t.at("file").get<std::string>()
                                  << "'; this build writes and reads '" << kCheckpointTokenizerFile << "'");
      const fs::path path = fs::path(dir_) / kCheckpointTokenizerFile;
      MYRIAD_CHECK(fs::is_regular_file(path),
                   "checkpoint: tokenizer file " << path.string() << " listed in " << manifest_path_ << " is missing");
      const std::unique_ptr<data::StoredFileReader> reader = at_rest_.open(path.string());
      const std::uint64_t size = reader->size();
      if (t.contains("file_id")) {
        bind_file(*reader, t.at("file_id").get<std::string>(), path.string(), manifest_path_);
        tokenizer_authenticated_ = true;
      }
      MYRIAD_CHECK(size == tokenizer_bytes_, "checkpoint: tokenizer file "
                                                 << path.string() << " has " << size << " bytes, the manifest records "
                                                 << tokenizer_bytes_ << " (truncated or replaced)");
    }
    std::set<std::string> listed_files;
    for (const json& f : manifest.at("files")) {
      const std::string name = f.at("name").get<std::string>();
      const fs::path path = checkpoint_data_file(dir_, name, manifest_path_);
      listed_files.insert(name);
      MYRIAD_CHECK(fs::is_regular_file(path),
                   "checkpoint: data file " << path.string() << " listed in " << manifest_path_ << " is missing");
      // Opened for the check only: a checkpoint of many ranks' files is not held open all at once.
      const std::unique_ptr<data::StoredFileReader> reader = at_rest_.open(path.string());
      const std::uint64_t expected = whole_number<std::uint64_t>(f.at("bytes"), field("files[" + name + "].bytes")),
                          size = reader->size();
      if (f.contains("file_id")) {
        bind_file(*reader, f.at("file_id").get<std::string>(), path.string(), manifest_path_);
        authenticated_.insert(name);
      }
      MYRIAD_CHECK(size == expected, "checkpoint: data file " << path.string() << " has " << size
                                                              << " bytes, the manifest records " << expected
                                                              << " (truncated or replaced)");
    }
    for (const auto& [name, t] : manifest.at("tensors").items()) {
      auto entry = std::make_unique<Entry>();
      entry->shape = whole_numbers(t.at("shape"), field("tensors." + name + ".shape"));
      for (const json& p : t.at("pieces")) {
        Piece piece;
        piece.file = p.at("file");
        MYRIAD_CHECK(listed_files.count(piece.file) == 1,
                     "checkpoint: a piece of tensor '" << name << "' in " << manifest_path_ << " names the file '"
                                                       << piece.file << "', which the manifest's files do not list");
        const std::string at = "tensors." + name + ".pieces";
        for (const json& r : p.at("box"))
          piece.box.push_back({whole_number<std::int64_t>(r.at(0), field(at + ".box")),
                               whole_number<std::int64_t>(r.at(1), field(at + ".box"))});
        piece.offset = whole_number<std::uint64_t>(p.at("offset"), field(at + ".offset"));
        piece.bytes = whole_number<std::uint64_t>(p.at("bytes"), field(at + ".bytes"));
        // A piece of an encrypted (bound) file has no CRC-32: its GCM tags authenticate it.
        MYRIAD_CHECK(p.contains("crc32") || authenticated_.count(piece.file) == 1,
                     "checkpoint: a piece of tensor '" << name << "' in " << manifest_path_
                                                       << " records no crc32, and its file '" << piece.file
                                                       << "' is not an encrypted file the manifest binds");
        if (p.contains("crc32")) piece.crc32 = whole_number<std::uint32_t>(p.at("crc32"), field(at + ".crc32"));
        MYRIAD_CHECK(piece.box.size() == entry->shape.size(), "checkpoint: a piece of tensor '"
                                                                  << name << "' in " << manifest_path_
                                                                  << " does not have one range per dimension");
        std::int64_t elements = 1;
        for (std::size_t d = 0; d < piece.box.size(); ++d) {
          const nn::IndexRange& r = piece.box[d];
          MYRIAD_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= entry->shape[d],
                       "checkpoint: a piece of tensor '" << name << "' in " << manifest_path_
                                                         << " lies outside its shape " << shape_string(entry->shape));
          // The product stays below 2^61, so that it and its 4 bytes per element cannot overflow.
          constexpr std::int64_t kMostElements = std::numeric_limits<std::int64_t>::max() / 4;
          MYRIAD_CHECK(r.size() == 0 || elements <= kMostElements / r.size(),
                       "checkpoint: a piece of tensor '" << name << "' in " << manifest_path_ << " spans more than "
                                                         << kMostElements << " elements (shape "
                                                         << shape_string(entry->shape) << ")");
          elements *= r.size();
        }
        MYRIAD_CHECK(piece.bytes == static_cast<std::uint64_t>(elements) * 4,
                     "checkpoint: a piece of tensor '" << name << "' in " << manifest_path_ << " records "
                                                       << piece.bytes << " bytes for " << elements << " f32 elements");
        entry->pieces.push_back(std::move(piece));
      }
      tensors_[name] = std::move(entry);
    }
  } catch (const json::exception& e) {
    MYRIAD_THROW("checkpoint: " << manifest_path_ << " is malformed: " << e.what());
  }
  MYRIAD_CHECK(model_yaml.empty() || header_.model_yaml == model_yaml,
               "checkpoint: " << manifest_path_ << " was saved for a different model:\n"
                              << header_.model_yaml << "this run's model is:\n"
                              << model_yaml);
}

CheckpointReader::~CheckpointReader() = default;

bool CheckpointReader::has(const std::string& tensor) const { return tensors_.count(tensor) == 1; }

const Shape& CheckpointReader::global_shape(const std::string& tensor) const {
  const auto found = tensors_.find(tensor);
  MYRIAD_CHECK(found != tensors_.end(), "checkpoint " << dir_ << ": no tensor '" << tensor << "'");
  return found->second->shape;
}

std::string CheckpointReader::tokenizer_file() const {
  return header_.tokenizer_fingerprint.empty() ? "" : (fs::path(dir_) / kCheckpointTokenizerFile).string();
}

data::StoredFileReader& CheckpointReader::file(const std::string& name) {
  // A few files stay open (an encrypted one holds up to 17 MiB of buffers): resharding from a
  // layout of many ranks reads from many files, each opened again when it comes back.
  constexpr std::size_t kOpenFiles = 4;
  if (files_.count(name) == 0 && files_.size() >= kOpenFiles) files_.erase(files_.begin());
  std::unique_ptr<data::StoredFileReader>& reader = files_[name];
  if (!reader) reader = at_rest_.open((fs::path(dir_) / name).string());
  return *reader;
}

void CheckpointReader::verify() const {
  std::vector<char> buffer;
  std::string open_path;  // in file order: one file open at a time
  std::unique_ptr<data::StoredFileReader> reader;
  auto check = [&](const fs::path& path, std::uint64_t offset, std::uint64_t bytes, std::uint32_t crc,
                   const std::string& what, bool authenticated) {
    if (!reader || open_path != path.string()) {
      reader = at_rest_.open(path.string());
      open_path = path.string();
    }
    const std::uint64_t size = reader->size();
    MYRIAD_CHECK(offset + bytes <= size, "checkpoint: " << what << " at bytes [" << offset << ", " << offset + bytes
                                                        << ") of " << path.string() << " (size " << size
                                                        << ") is out of bounds; the file is truncated or corrupt");
    buffer.resize(bytes);
    if (bytes > 0) reader->read_at(offset, buffer.data(), bytes);  // an encrypted file's tags are checked here
    if (authenticated) return;
    MYRIAD_CHECK(data::crc32(buffer.data(), bytes) == crc,
                 "checkpoint: " << what << " in " << path.string() << " fails its checksum (file corrupt)");
  };
  // In file order: each file is read front to back once (an encrypted one decrypts each chunk once).
  std::vector<std::pair<const std::string*, const Piece*>> order;
  for (const auto& [name, entry] : tensors_) {
    for (const Piece& piece : entry->pieces) order.emplace_back(&name, &piece);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->file, a.second->offset) < std::tie(b.second->file, b.second->offset);
  });
  for (const auto& [name, piece] : order) {
    check(fs::path(dir_) / piece->file, piece->offset, piece->bytes, piece->crc32, "tensor '" + *name + "'",
          authenticated_.count(piece->file) == 1);
  }
  if (!header_.tokenizer_fingerprint.empty()) {
    check(tokenizer_file(), 0, tokenizer_bytes_, tokenizer_crc32_, "the tokenizer", tokenizer_authenticated_);
  }
}

std::string checkpoint_damage(const std::string& checkpoint_dir, const data::AtRest& at_rest) {
  at_rest.check_key((fs::path(checkpoint_dir) / "manifest.json").string());  // a key problem is not damage
  try {
    CheckpointReader(checkpoint_dir, "", at_rest).verify();
    return "";
  } catch (const Error& e) {
    return e.message();
  }
}

const Tensor& CheckpointReader::load_piece(const std::string& tensor, Piece& piece) {
  if (piece.data.defined()) return piece.data;
  const fs::path path = fs::path(dir_) / piece.file;
  data::StoredFileReader& reader = file(piece.file);
  const std::uint64_t size = reader.size();
  MYRIAD_CHECK(piece.offset + piece.bytes <= size,
               "checkpoint: tensor '" << tensor << "' at bytes [" << piece.offset << ", " << piece.offset + piece.bytes
                                      << ") of " << path.string() << " (size " << size
                                      << ") is out of bounds; the file is truncated or corrupt");
  Shape extents;
  for (const nn::IndexRange& r : piece.box) extents.push_back(r.size());
  Tensor data = Tensor::empty(extents);
  if (piece.bytes > 0) reader.read_at(piece.offset, data.raw_data(), piece.bytes);
  MYRIAD_CHECK(authenticated_.count(piece.file) == 1 || data::crc32(data.raw_data(), piece.bytes) == piece.crc32,
               "checkpoint: tensor '" << tensor << "' in " << path.string() << " fails its checksum (file corrupt)");
  piece.data = data;
  return piece.data;
}

void CheckpointReader::read(const std::string& tensor, const Shape& global_shape,
                            const std::vector<nn::IndexRange>& box, const Tensor& dest) {
  auto found = tensors_.find(tensor);
  MYRIAD_CHECK(found != tensors_.end(), "checkpoint: " << manifest_path_ << " has no tensor '" << tensor << "'");
  Entry& entry = *found->second;
  MYRIAD_CHECK(entry.shape == global_shape, "checkpoint: tensor '" << tensor << "' in " << manifest_path_
                                                                   << " has shape " << shape_string(entry.shape)
                                                                   << ", this run expects "
                                                                   << shape_string(global_shape));
  MYRIAD_CHECK(box.size() == global_shape.size() && dest.dim() == static_cast<int>(box.size()),
               "checkpoint: read of '" << tensor << "' needs one range per dimension and a destination of that rank");
  std::int64_t wanted = 1;
  for (std::size_t d = 0; d < box.size(); ++d) {
    MYRIAD_CHECK(dest.size(static_cast<int>(d)) == box[d].size(), "checkpoint: read of '" << tensor << "': destination "
                                                                                          << dest.describe()
                                                                                          << " does not match the box");
    wanted *= box[d].size();
  }
  std::int64_t covered = 0;
  for (Piece& piece : entry.pieces) {
    std::vector<nn::IndexRange> common(box.size());
    bool overlaps = true;
    std::int64_t elements = 1;
    for (std::size_t d = 0; d < box.size(); ++d) {
      common[d] = {std::max(box[d].begin, piece.box[d].begin), std::min(box[d].end, piece.box[d].end)};
      overlaps = overlaps && common[d].begin < common[d].end;
      elements *= std::max<std::int64_t>(common[d].size(), 0);
    }
    if (!overlaps) continue;
    Tensor source = load_piece(tensor, piece), target = dest;
    for (std::size_t d = 0; d < box.size(); ++d) {
      const int dim = static_cast<int>(d);
      source = source.slice(dim, common[d].begin - piece.box[d].begin, common[d].end - piece.box[d].begin);
      target = target.slice(dim, common[d].begin - box[d].begin, common[d].end - box[d].begin);
    }
    target.copy_from(source);
    covered += elements;
  }
  MYRIAD_CHECK(covered == wanted, "checkpoint: the pieces of tensor '" << tensor << "' in " << manifest_path_
                                                                       << " cover " << covered << " of the " << wanted
                                                                       << " elements asked for");
}

void CheckpointReader::read_whole(const std::string& tensor, const Tensor& dest) {
  std::vector<nn::IndexRange> box;
  for (std::int64_t extent : dest.shape()) box.push_back({0, extent});
  read(tensor, dest.shape(), box, dest);
}

void read_prefixed_state(CheckpointReader& reader, const nn::ParameterStore& store, const std::string& prefix,
                         Tensor& flat) {
  for (const nn::Parameter& p : store.all()) {
    nn::for_each_held_box(p, nn::parameter_view(flat, p),
                          [&](const std::vector<nn::IndexRange>& box, const Tensor& piece) {
                            reader.read(prefix + p.name, p.global_shape, box, piece);
                          });
  }
}

void read_parameter_state(CheckpointReader& reader, const nn::ParameterStore& store, Tensor& values, Tensor* m,
                          Tensor* v) {
  const std::pair<std::string, Tensor*> parts[] = {{"", &values}, {kAdamMPrefix, m}, {kAdamVPrefix, v}};
  for (const auto& [prefix, flat] : parts) {
    if (flat != nullptr && flat->defined()) read_prefixed_state(reader, store, prefix, *flat);
  }
}

}  // namespace myriad::train
