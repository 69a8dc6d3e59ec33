// fuzz_seeds DIR: writes the seed corpora of the fuzz targets into DIR/<target>/, each made by
// the project's own writers (so a seed is a valid input the fuzzer then mutates): token shards
// (u16 and i32), compressed shards, safetensors files, a GPT-2 vocabulary (encoder.json NUL
// vocab.bpe), trained tokenizer files and checkpoint manifests for the fixed rank_0.bin of
// fuzz_checkpoint_manifest. The YAML seeds are the repository's configs/*.yaml (scripts/fuzz.sh
// copies them).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/byte_unicode.h"
#include "myriad/data/compressed_shard.h"
#include "myriad/data/encrypted_file.h"
#include "myriad/data/shard_writer.h"
#include "myriad/data/token_shard.h"
#include "myriad/train/checkpoint/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::int32_t> ramp(int count, int modulo) {
  std::vector<std::int32_t> ids;
  for (int i = 0; i < count; ++i) ids.push_back((i * 7) % modulo);
  return ids;
}

void shard_seeds(const fs::path& dir) {
  fs::create_directories(dir / "token_shard");
  fs::create_directories(dir / "compressed_shard");
  myriad::data::write_token_shard((dir / "token_shard/u16.bin").string(), ramp(40, 50), 50);
  myriad::data::write_token_shard((dir / "token_shard/i32.bin").string(), ramp(12, 70000), 70000);
  myriad::data::write_token_shard((dir / "token_shard/empty.bin").string(), {}, 10);
  myriad::data::write_compressed_token_shard((dir / "compressed_shard/u16.bin").string(), ramp(40, 50), 50, {16, 3});
  myriad::data::write_compressed_token_shard((dir / "compressed_shard/i32.bin").string(), ramp(9, 70000), 70000,
                                             {4, 1});
}

void safetensors_seeds(const fs::path& dir) {
  fs::create_directories(dir / "safetensors");
  myriad::Tensor a = myriad::Tensor::empty({2, 3});
  for (int i = 0; i < 6; ++i) static_cast<float*>(a.raw_data())[i] = static_cast<float>(i) * 0.5f;
  myriad::Tensor b = myriad::Tensor::empty({4}, myriad::DType::i8);
  for (int i = 0; i < 4; ++i) static_cast<std::int8_t*>(b.raw_data())[i] = static_cast<std::int8_t>(i - 2);
  myriad::train::write_safetensors((dir / "safetensors/f32.safetensors").string(), {{{"wte", a}}, {{"format", "pt"}}});
  myriad::train::write_safetensors((dir / "safetensors/two.safetensors").string(),
                                   {{{"wte", a}, {"blocks.0.w", b}}, {}});
}

// Encrypted files under fuzz_encrypted_file's fixed key (chunks of 16 bytes: several per file),
// and a key file.
void encrypted_seeds(const fs::path& dir) {
  fs::create_directories(dir / "encrypted_file");
  myriad::data::KeyRing keys;
  keys.add("fuzz", std::string(32, 'k'), true);
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{40}}) {
    myriad::data::EncryptedWriter writer((dir / ("encrypted_file/" + std::to_string(n))).string(), keys, 16);
    const std::string data(n, 'x');
    writer.write(data.data(), data.size());
    writer.finish();
  }
  write_text(dir / "encrypted_file/keys",
             "key a " + std::string(64, '1') + "\nkey b " + std::string(64, '2') + "\ncurrent b\n");
}

void bpe_seeds(const fs::path& dir) {
  fs::create_directories(dir / "gpt2_bpe");
  json encoder = json::object();
  for (int byte = 0; byte < 256; ++byte) {
    encoder[myriad::data::bytes_to_unicode_string(std::string(1, static_cast<char>(byte)))] = byte;
  }
  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "Ġ w"};
  std::string vocab = "#version: 0.2\n";
  int id = 256;
  for (const std::string& merge : merges) {
    vocab += merge + "\n";
    std::string joined = merge;
    joined.erase(joined.find(' '), 1);
    encoder[joined] = id++;
  }
  encoder["<|endoftext|>"] = id;
  write_text(dir / "gpt2_bpe/small", encoder.dump() + std::string(1, '\0') + vocab);

  fs::create_directories(dir / "bpe_file");
  const std::string text = "the quick brown fox jumps over the lazy dog; the dog sleeps. " + std::string(200, 'a');
  myriad::data::BpeTokenizer::train(text, 270).save((dir / "bpe_file/trained.bpe").string());
  myriad::data::BpeTokenizer::train("abc abd abe", 258).save((dir / "bpe_file/tiny.bpe").string());
}

void manifest_seeds(const fs::path& dir) {
  fs::create_directories(dir / "checkpoint_manifest");
  const std::string data(64, '\x01');
  const std::uint32_t crc = myriad::data::crc32(data.data(), data.size());
  json whole = {{"file", "rank_0.bin"}, {"box", {{0, 16}}}, {"offset", 0}, {"bytes", 64}, {"crc32", crc}};
  json manifest = {{"format_version", 2},
                   {"step", 3},
                   {"config", "model: {}\n"},
                   {"model", "architecture: gpt2\n"},
                   {"layout", "dp=1"},
                   {"rng", {{"seed", 1}}},
                   {"data_cursor", {{"samples_consumed", 24}}},
                   {"optimizer", {{"adamw_steps", 3}}},
                   {"files", {{{"name", "rank_0.bin"}, {"bytes", 64}}}},
                   {"tensors", {{"wte", {{"shape", {16}}, {"dtype", "f32"}, {"pieces", {whole}}}}}}};
  write_text(dir / "checkpoint_manifest/whole.json", manifest.dump(1));
  const std::uint32_t half = myriad::data::crc32(data.data(), 32);
  manifest["tensors"]["w"] = {
      {"shape", {2, 8}},
      {"dtype", "f32"},
      {"pieces",
       {{{"file", "rank_0.bin"}, {"box", {{0, 1}, {0, 8}}}, {"offset", 0}, {"bytes", 32}, {"crc32", half}},
        {{"file", "rank_0.bin"}, {"box", {{1, 2}, {0, 8}}}, {"offset", 32}, {"bytes", 32}, {"crc32", half}}}}};
  manifest["loss_scaler"] = {{"scale", 65536.0}, {"finite_steps", 2}};
  write_text(dir / "checkpoint_manifest/pieces.json", manifest.dump(1));
  manifest["tokenizer"] = {
      {"file", "tokenizer.bpe"}, {"fingerprint", "abc"}, {"vocab_size", 258}, {"bytes", 10}, {"crc32", 0}};
  write_text(dir / "checkpoint_manifest/tokenizer.json", manifest.dump(1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds DIR\n";
    return 2;
  }
  const fs::path dir = argv[1];
  shard_seeds(dir);
  safetensors_seeds(dir);
  encrypted_seeds(dir);
  bpe_seeds(dir);
  manifest_seeds(dir);
  return 0;
}
