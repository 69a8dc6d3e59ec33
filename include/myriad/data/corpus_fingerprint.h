// Corpus fingerprint — what a token cache was built from, so that a changed corpus is noticed.
//
// One line per input file, in the order given: its path, size, modification time and the CRC-32
// of its whole content (a file rewritten in place with the same size and time is still noticed).
// Two fingerprints are equal exactly when every file's line is; first_difference() says which
// file changed, appeared or went away, for the log line that explains a rebuild.
#pragma once

#include <string>
#include <vector>

namespace myriad::data {

// "file <path> size <bytes> mtime <ns> crc32 <8 hex digits>\n" per file. Throws myriad::Error
// naming a file that cannot be read.
std::string corpus_fingerprint(const std::vector<std::string>& files);

// What differs between two fingerprints, e.g. "a.txt changed (size 10 -> 12)", "b.txt is new",
// "c.txt is gone"; "" when their file lines are equal (other lines are not compared).
std::string first_difference(const std::string& before, const std::string& now);

}  // namespace myriad::data
