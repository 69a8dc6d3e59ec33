// The machine profile file itself (schema "myriad.machine_profile/1", documented key by key in
// python/myriad/planner/hardware.py): read it if it exists, set some dotted keys, write it back.
// Shared by the CPU benchmarks (machine_profile.h, which adds the machine description and core
// count) and the GPU ones (benchmarks/gpu, which name the device), so it depends on nothing but
// nlohmann_json and myriad::Error.
//
// Invariants: the file on disk is always a complete JSON object (written to FILE.tmp.<pid>, then
// renamed over FILE); an existing file that is not a JSON object is an error and is not
// overwritten; every write sets schema, machine, date (now, UTC), commands.<writer> (this writer's
// command line) and command (every writer's command line, "; "-joined).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace myriad::bench {

// (dotted key, value): "compute.matmul_flops_per_s" sets data["compute"]["matmul_flops_per_s"],
// replacing what was there (an object value replaces the whole object).
using ProfilePart = std::pair<std::string, nlohmann::json>;

// Reads `path` if it exists, applies `parts`, the header keys (`machine`; `writer` names the entry
// of `commands` that `command_line` fills), and writes it back atomically. Throws myriad::Error.
void write_profile_parts(const std::string& path, const std::string& writer, const std::vector<ProfilePart>& parts,
                         const std::string& machine, const std::string& command_line);

// Before measuring: throws myriad::Error naming `path` when write_profile_parts would refuse it at the
// end (an existing file that is not a JSON object, a folder that is missing or not writable).
void check_profile_writable(const std::string& path);
// The same for a main without an error handler: prints "<program>: <reason>" on stderr and returns
// false where check_profile_writable throws.
bool profile_writable_or_report(const char* program, const std::string& path);

// argv joined by spaces (the command that measured a profile's keys).
std::string joined_command_line(int argc, char** argv);

}  // namespace myriad::bench
