// Sharded checkpoint writing: pieces of parameters, per-rank data files, the manifest, atomic
// rename, the `latest` pointer and retention.
#include "myriad/train/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "myriad/core/progress_bar.h"
#include "myriad/train/checkpoint/checkpoint_folder.h"
#include "myriad/data/token_shard.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace myriad::train {

namespace {

std::string step_name(std::int64_t step) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "step_%08lld", static_cast<long long>(step));
  return buffer;
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

json box_json(const std::vector<nn::IndexRange>& box) {
  json out = json::array();
  for (const nn::IndexRange& r : box) out.push_back({r.begin, r.end});
  return out;
}

}  // namespace

std::vector<CheckpointPiece> parameter_pieces(const nn::ParameterStore& store, const Tensor& flat,
                                              const std::string& prefix) {
  std::vector<CheckpointPiece> pieces;
  for (const nn::Parameter& p : store.all()) {
    if (!p.primary) continue;
    nn::for_each_held_box(p, nn::parameter_view(flat, p),
                          [&](const std::vector<nn::IndexRange>& box, const Tensor& piece) {
                            pieces.push_back({prefix + p.name, p.global_shape, box, piece});
                          });
  }
  return pieces;
}

namespace {

// Boxes (local coordinates) covering the flat range [begin, end) of a row-major tensor of
// `shape`, each a contiguous run of that flat order; second = the box's first flat index.
void flat_range_boxes(const Shape& shape, std::size_t dim, std::int64_t begin, std::int64_t end,
                      std::vector<nn::IndexRange>& prefix, std::int64_t base,
                      std::vector<std::pair<std::vector<nn::IndexRange>, std::int64_t>>& out) {
  if (begin >= end) return;
  if (dim + 1 == shape.size()) {
    std::vector<nn::IndexRange> box = prefix;
    box.push_back({begin, end});
    out.emplace_back(std::move(box), base + begin);
    return;
  }
  std::int64_t inner = 1;
  for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  auto rows = [&](std::int64_t first_row, std::int64_t last_row, std::int64_t from, std::int64_t to) {
    prefix.push_back({first_row, last_row});
    if (last_row - first_row > 1 || (from == 0 && to == inner)) {  // whole rows: one box
      std::vector<nn::IndexRange> box = prefix;
      for (std::size_t d = dim + 1; d < shape.size(); ++d) box.push_back({0, shape[d]});
      out.emplace_back(std::move(box), base + first_row * inner);
    } else {
      flat_range_boxes(shape, dim + 1, from, to, prefix, base + first_row * inner, out);
    }
    prefix.pop_back();
  };
  std::int64_t row = begin / inner;
  const std::int64_t last_row = end / inner, tail = end % inner;
  if (begin % inner != 0) {  // partial leading row
    rows(row, row + 1, begin % inner, row == last_row ? tail : inner);
    if (row == last_row) return;
    ++row;
  }
  if (last_row > row) rows(row, last_row, 0, inner);
  if (tail != 0) rows(last_row, last_row + 1, 0, tail);
}

}  // namespace

std::vector<CheckpointPiece> segment_pieces(const nn::Parameter& p, std::int64_t first, std::int64_t last,
                                            const Tensor& packed, std::int64_t packed_offset,
                                            const std::string& prefix) {
  MYRIAD_CHECK(first >= 0 && first <= last && last <= shape_numel(p.shape),
               "checkpoint: segment [" << first << ", " << last << ") outside parameter '" << p.name << "'");
  std::vector<std::pair<std::vector<nn::IndexRange>, std::int64_t>> boxes;
  std::vector<nn::IndexRange> scratch;
  flat_range_boxes(p.shape, 0, first, last, scratch, 0, boxes);
  std::vector<CheckpointPiece> pieces;
  for (auto& [box, flat_start] : boxes) {
    // Along the shard dimension the local box may span several tensor-parallel ranges: one piece each.
    const std::size_t d = p.shard_dim < 0 ? 0 : static_cast<std::size_t>(p.shard_dim);
    std::vector<std::pair<nn::IndexRange, nn::IndexRange>> spans;  // (local, global) along d
    if (p.shard_dim < 0) {
      spans.emplace_back(box[d], box[d]);
    } else {
      std::int64_t at = 0;
      for (const nn::IndexRange& r : p.shard_ranges) {
        const std::int64_t lo = std::max(box[d].begin, at), hi = std::min(box[d].end, at + r.size());
        if (lo < hi) spans.push_back({{lo, hi}, {r.begin + lo - at, r.begin + hi - at}});
        at += r.size();
      }
    }
    for (std::size_t e = 0; e < d && spans.size() > 1; ++e) {
      MYRIAD_CHECK(box[e].size() == 1, "checkpoint: a piece of '" << p.name << "' spans several shard ranges "
                                                                  << "non-contiguously");
    }
    std::int64_t inner = 1;  // elements per step along d inside the box
    for (std::size_t e = d + 1; e < box.size(); ++e) inner *= box[e].size();
    for (const auto& [local, global] : spans) {
      std::vector<nn::IndexRange> global_box = box;
      global_box[d] = global;
      Shape extents;
      std::int64_t count = 1;
      for (const nn::IndexRange& r : global_box) {
        extents.push_back(r.size());
        count *= r.size();
      }
      const std::int64_t start = packed_offset + (flat_start - first) + (local.begin - box[d].begin) * inner;
      Tensor data = Tensor::from_storage(packed.storage(), extents, contiguous_strides(extents),
                                         packed.offset() + start, DType::f32);
      MYRIAD_CHECK(start >= 0 && start + count <= packed.numel(),
                   "checkpoint: piece of '" << p.name << "' outside its packed buffer");
      pieces.push_back({prefix + p.name, p.global_shape, std::move(global_box), std::move(data)});
    }
  }
  return pieces;
}

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  return (fs::path(dir) / step_name(step)).string();
}

std::string begin_checkpoint(const std::string& dir, std::int64_t step) {
  fs::create_directories(dir);
  // Temporary directories left by a save that was killed midway are never complete: remove those
  // myriad made (they carry its marker); a folder of that name without it is the user's.
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() && entry.path().filename().string().rfind(".tmp-step_", 0) == 0 &&
        fs::is_regular_file(entry.path() / kCheckpointMarker)) {
      fs::remove_all(entry.path());
    }
  }
  const fs::path tmp = fs::path(dir) / (".tmp-" + step_name(step));
  MYRIAD_CHECK(!fs::exists(tmp), "checkpoint: " << tmp.string() << " exists and was not made by myriad (no "
                                                << kCheckpointMarker
                                                << "): move it out of checkpoint.dir; nothing was deleted");
  fs::create_directories(tmp);
  data::AtRest().write_all(
      (tmp / kCheckpointMarker).string(),
      "written by myriad: a checkpoint folder (safe to delete with it)\n");  // no model content: clear
  return tmp.string();
}

std::string write_checkpoint_file(const std::string& tmp_dir, const std::string& file_name,
                                  const std::vector<CheckpointPiece>& pieces, const data::AtRest& at_rest) {
  const fs::path path = fs::path(tmp_dir) / file_name;
  json entries = json::array();
  const std::unique_ptr<data::StoredFileWriter> out = at_rest.create(path.string());
  std::int64_t total = 0;
  for (const CheckpointPiece& p : pieces) total += static_cast<std::int64_t>(p.data.nbytes());
  ProgressBar bar("saving " + path.string(), total, true);
  // An encrypted file (it has an id, which the manifest binds) is authenticated byte for byte by
  // its GCM tags, so its pieces carry no CRC-32: computing one would cost a pass over the data
  // that no reader would ever check.
  const bool authenticated = !out->file_id().empty();
  std::uint64_t offset = 0;
  for (const CheckpointPiece& p : pieces) {
    MYRIAD_CHECK(p.data.dtype() == DType::f32 && p.data.device().is_cpu() && p.box.size() == p.global_shape.size(),
                 "checkpoint: piece of '" << p.tensor << "' must be an f32 CPU tensor with one range per dimension, is "
                                          << p.data.describe());
    const Tensor bytes = p.data.contiguous();
    const std::size_t size = bytes.nbytes();
    out->write(bytes.raw_data(), size);
    entries.push_back({{"tensor", p.tensor},
                       {"shape", p.global_shape},
                       {"file", file_name},
                       {"box", box_json(p.box)},
                       {"offset", offset},
                       {"bytes", size}});
    if (!authenticated) entries.back()["crc32"] = data::crc32(bytes.raw_data(), size);
    offset += size;
    bar.update(static_cast<std::int64_t>(offset));
  }
  out->finish();  // fsynced
  bar.finish();
  json file = {{"file", file_name}, {"bytes", offset}, {"pieces", entries}};
  if (const std::string id = out->file_id(); !id.empty()) file["file_id"] = id;
  return file.dump();
}

std::string finish_checkpoint(const std::string& dir, const std::string& tmp_dir, const CheckpointHeader& header,
                              const std::vector<std::string>& file_entries, int keep, const data::AtRest& at_rest) {
  const std::string name = step_name(header.step);
  const fs::path tmp = tmp_dir, final_dir = fs::path(dir) / name;
  json manifest;
  manifest["format_version"] = kCheckpointFormatVersion;
  manifest["step"] = header.step;
  manifest["config"] = header.config_yaml;
  manifest["model"] = header.model_yaml;
  manifest["layout"] = header.layout;
  manifest["data_cursor"] = {{"step", header.step}, {"samples_consumed", header.samples_consumed}};
  manifest["rng"] = {{"generator", "philox4x32-10"}, {"seed", header.seed}, {"counter", "f(seed, step, index)"}};
  manifest["optimizer"] = {{"adamw_steps", header.optimizer_steps < 0 ? header.step : header.optimizer_steps}};
  if (header.loss_scale > 0) {
    manifest["loss_scaler"] = {{"scale", header.loss_scale}, {"finite_steps", header.loss_scale_finite_steps}};
  }
  if (!header.cpu_gemm_plan.empty()) manifest["cpu_gemm_plan"] = header.cpu_gemm_plan;
  if (!header.tokenizer_fingerprint.empty()) {
    // Written into the temporary directory before this manifest: recorded with its size and checksum.
    const fs::path tokenizer = tmp / kCheckpointTokenizerFile;
    MYRIAD_CHECK(fs::is_regular_file(tokenizer),
                 "checkpoint: " << tokenizer.string() << " is missing; the tokenizer is written before the manifest");
    const std::unique_ptr<data::StoredFileReader> reader = at_rest.open(tokenizer.string());
    std::string bytes(reader->size(), '\0');
    if (!bytes.empty()) reader->read_at(0, bytes.data(), bytes.size());
    manifest["tokenizer"] = {{"file", kCheckpointTokenizerFile},
                             {"vocab_size", header.tokenizer_vocab_size},
                             {"fingerprint", header.tokenizer_fingerprint},
                             {"bytes", bytes.size()},
                             {"crc32", data::crc32(bytes.data(), bytes.size())}};
    if (!reader->file_id().empty()) manifest["tokenizer"]["file_id"] = reader->file_id();
  }
  json files = json::array(), tensors = json::object();
  for (const std::string& text : file_entries) {
    const json entry = json::parse(text);
    files.push_back({{"name", entry.at("file")}, {"bytes", entry.at("bytes")}});
    if (entry.contains("file_id")) files.back()["file_id"] = entry.at("file_id");
    for (const json& piece : entry.at("pieces")) {
      json& t = tensors[piece.at("tensor").get<std::string>()];
      if (t.is_null()) t = {{"shape", piece.at("shape")}, {"dtype", "f32"}, {"pieces", json::array()}};
      MYRIAD_CHECK(t.at("shape") == piece.at("shape"), "checkpoint: tensor '" << piece.at("tensor").get<std::string>()
                                                                              << "' written with two global shapes");
      t.at("pieces").push_back({{"file", piece.at("file")},
                                {"box", piece.at("box")},
                                {"offset", piece.at("offset")},
                                {"bytes", piece.at("bytes")}});
      if (piece.contains("crc32")) t.at("pieces").back()["crc32"] = piece.at("crc32");
    }
  }
  manifest["files"] = files;
  manifest["tensors"] = tensors;
  at_rest.write_all((tmp / "manifest.json").string(), manifest.dump(1));
  fsync_path(tmp);
  // A checkpoint of this step saved before is replaced; a folder of that name myriad did not write
  // is the user's and stays (the save fails, naming it, and its temporary folder is left).
  MYRIAD_CHECK(!fs::exists(final_dir) || written_by_myriad(final_dir.string()),
               "checkpoint: " << final_dir.string() << " exists and was not written by myriad (no " << kCheckpointMarker
                              << " and no myriad manifest): move it out of checkpoint.dir; "
                              << "nothing was deleted");
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(dir);
  data::AtRest().write_all((fs::path(dir) / ".latest.tmp").string(), name + "\n");
  fs::rename(fs::path(dir) / ".latest.tmp", fs::path(dir) / "latest");
  apply_retention(dir, keep);
  return final_dir.string();
}

std::string save_checkpoint(const std::string& dir, const CheckpointHeader& header,
                            const std::vector<CheckpointPiece>& pieces, int keep, const data::AtRest& at_rest) {
  const std::string tmp = begin_checkpoint(dir, header.step);
  const std::string entries = write_checkpoint_file(tmp, "rank_0.bin", pieces, at_rest);
  return finish_checkpoint(dir, tmp, header, {entries}, keep, at_rest);
}

std::string read_checkpoint_config(const std::string& checkpoint_dir, const data::AtRest& at_rest) {
  const fs::path manifest_path = fs::path(checkpoint_dir) / "manifest.json";
  MYRIAD_CHECK(fs::exists(manifest_path), "checkpoint: " << manifest_path.string() << " not found");
  const std::string text = at_rest.read_all(manifest_path.string());
  try {
    return json::parse(text).at("config").get<std::string>();
  } catch (const json::exception& e) {
    MYRIAD_THROW("checkpoint: " << manifest_path.string() << " has no readable config: " << e.what());
  }
}

std::string latest_checkpoint(const std::string& dir) { return find_resume_point(dir).path; }

}  // namespace myriad::train
