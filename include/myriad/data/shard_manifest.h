// Shard folder checks against its manifest.json (written last by `myriad-data tokenize` and by a
// run's token cache): every shard the manifest lists for a split is present with its recorded size
// (and, when `check_crc`, its whole-file CRC-32), and no other `<split>_*.bin` file is there. A
// folder an interrupted tokenize left has no manifest: the check says so, and callers decide
// (`inspect --verify` refuses it unless `--plain`; training uses it as given, with a warning).
#pragma once

#include <string>
#include <vector>

namespace myriad::data {

struct ShardFolderCheck {
  bool has_manifest = false;
  std::vector<std::string> problems;  // one line each: the shard and what is wrong; empty = agrees
  std::string describe() const;       // the problems, each on its own indented line
};

ShardFolderCheck check_shard_folder(const std::string& directory, bool check_crc);

}  // namespace myriad::data
