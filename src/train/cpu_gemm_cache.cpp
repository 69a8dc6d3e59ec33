// CpuGemmCache (cpu_gemm_cache.h): the machine's file of measured CPU GEMM routes.
#include "myriad/train/cpu_gemm_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "myriad/core/error.h"
#include "myriad/data/token_shard.h"

namespace myriad::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kHeader = "# myriad CPU GEMM routes for: ";

std::string cache_folder() {
  auto value = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  const std::string chosen = value("MYRIAD_CPU_GEMM_CACHE");
  if (chosen == "off") return "";
  if (!chosen.empty()) return chosen;
  if (const std::string xdg = value("XDG_CACHE_HOME"); !xdg.empty()) return (fs::path(xdg) / "myriad").string();
  if (const std::string home = value("HOME"); !home.empty()) return (fs::path(home) / ".cache" / "myriad").string();
  return "";
}

}  // namespace

CpuGemmCache CpuGemmCache::from_environment() {
  const std::string key = cpu::gemm_machine_key();
  const std::string folder = cache_folder();
  if (folder.empty()) return CpuGemmCache("", key);
  char name[32];
  std::snprintf(name, sizeof name, "%08x.plan", data::crc32(key.data(), key.size()));
  return CpuGemmCache((fs::path(folder) / "cpu_gemm" / name).string(), key);
}

cpu::GemmPlan CpuGemmCache::read(std::string* problem) const {
  problem->clear();
  if (!enabled() || !fs::exists(path_)) return {};
  std::ifstream in(path_);
  std::string first;
  if (!in || !std::getline(in, first)) {
    *problem = path_ + " cannot be read";
    return {};
  }
  if (first != kHeader + key_) {
    *problem = path_ + " holds routes for another machine or set-up ('" + first + "')";
    return {};
  }
  std::ostringstream rest;
  rest << in.rdbuf();
  try {
    return cpu::GemmPlan::from_text(rest.str(), path_);
  } catch (const Error& e) {
    *problem = e.message();
    return {};
  }
}

std::string CpuGemmCache::add(const cpu::GemmPlan& plan) const {
  if (!enabled()) return "";
  std::string problem;
  cpu::GemmPlan merged = read(&problem);  // an unusable file is replaced
  for (const auto& [shape, route] : plan.routes()) merged.set(shape, route);
  const fs::path path(path_), tmp = path_ + ".tmp-" + std::to_string(::getpid());
  std::error_code error;
  fs::create_directories(path.parent_path(), error);
  if (error) return "cannot create " + path.parent_path().string() + ": " + error.message();
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kHeader << key_ << "\n" << merged.to_text();
    out.close();
    if (!out) {
      fs::remove(tmp, error);
      return "cannot write " + tmp.string();
    }
  }
  fs::rename(tmp, path, error);
  if (error) {
    const std::string why = "cannot replace " + path_ + ": " + error.message();
    fs::remove(tmp, error);
    return why;
  }
  return "";
}

}  // namespace myriad::train
