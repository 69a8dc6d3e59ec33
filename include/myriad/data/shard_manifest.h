// Shard folder checks against its manifest.json (written last by `myriad-data tokenize` and by a
// run's token cache): every shard the manifest lists for a split is present with its recorded size
// (and, when `check_crc`, its CRC-32), and no other `<split>_*.bin` file is there. A
// folder an interrupted tokenize left has no manifest: the check says so, and callers decide
// (`inspect --verify` refuses it unless `--plain`; training uses it as given, with a warning).
#pragma once

#include <string>
#include <vector>

#include "myriad/data/at_rest.h"

namespace myriad::data {

struct ShardFolderCheck {
  bool has_manifest = false;
  std::vector<std::string> problems;  // one line each: the shard and what is wrong; empty = agrees
  std::string describe() const;       // the problems, each on its own indented line
};

// The manifest's `bytes` and `crc32` describe each shard's own bytes — an encrypted shard's
// decrypted ones, read with `at_rest`'s keys — so rotating its key changes nothing recorded.
ShardFolderCheck check_shard_folder(const std::string& directory, bool check_crc, const AtRest& at_rest = {});

// The CRC-32 of a stored file's (plaintext) bytes, read in 1 MiB pieces.
std::uint32_t stored_file_crc(StoredFileReader& reader);

}  // namespace myriad::data
