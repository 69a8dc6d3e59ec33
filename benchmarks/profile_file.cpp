// Implementation of the machine profile file (see profile_file.h).
#include "profile_file.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "myriad/core/error.h"

namespace myriad::bench {

namespace {

std::string iso_now() {
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

void set_dotted(nlohmann::json& root, const std::string& key, const nlohmann::json& value) {
  nlohmann::json* node = &root;
  std::size_t start = 0;
  for (std::size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
    nlohmann::json& child = (*node)[key.substr(start, dot - start)];
    if (!child.is_object()) child = nlohmann::json::object();
    node = &child;
    start = dot + 1;
  }
  (*node)[key.substr(start)] = value;
}

}  // namespace

std::string joined_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i > 0 ? " " : "") + std::string(argv[i]);
  return line;
}

namespace {

// The profile as it is on disk (an empty object when there is none yet).
nlohmann::json read_existing(const std::string& path) {
  nlohmann::json data = nlohmann::json::object();
  if (std::filesystem::exists(path)) {
    std::ifstream in(path);
    try {
      data = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      MYRIAD_THROW("machine profile " << path << ": not JSON (" << e.what() << "); not overwritten");
    }
    MYRIAD_CHECK(data.is_object(), "machine profile " << path << ": the top level is not an object; not overwritten");
  }
  return data;
}

std::string temporary_name(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

}  // namespace

void check_profile_writable(const std::string& path) {
  read_existing(path);
  const std::string tmp = temporary_name(path);
  {
    std::ofstream probe(tmp);
    MYRIAD_CHECK(probe.good(), "machine profile " << path << ": cannot write " << tmp
                                                  << " (does the folder exist, and may this user write there?)");
  }
  std::filesystem::remove(tmp);
}

bool profile_writable_or_report(const char* program, const std::string& path) {
  try {
    check_profile_writable(path);
    return true;
  } catch (const Error& e) {
    std::cerr << program << ": " << e.message() << "\n";
    return false;
  }
}

void write_profile_parts(const std::string& path, const std::string& writer, const std::vector<ProfilePart>& parts,
                         const std::string& machine, const std::string& command_line) {
  nlohmann::json data = read_existing(path);
  for (const ProfilePart& part : parts) set_dotted(data, part.first, part.second);
  data["schema"] = "myriad.machine_profile/1";
  data["machine"] = machine;
  data["date"] = iso_now();
  set_dotted(data, "commands." + writer, command_line);
  std::string command;
  for (const auto& [name, line] : data["commands"].items())
    command += (command.empty() ? "" : "; ") + line.get<std::string>();
  data["command"] = command;
  const std::string tmp = temporary_name(path);
  {
    std::ofstream out(tmp);
    out << data.dump(2) << "\n";
    out.close();
    MYRIAD_CHECK(out.good(), "machine profile " << path << ": cannot write " << tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace myriad::bench
