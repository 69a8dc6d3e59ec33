#!/usr/bin/env bash
# Packs what the GPU check's reduced build (cmake -DMYRIAD_GPU_ONLY=ON) needs and the GPU machine
# lacks, from this machine's installed Debian packages, into one archive for the device tool's
# `carry`: spdlog and fmt headers (used header-only there), nlohmann-json's headers and CMake
# config (the GPU benchmarks' --profile), OpenBLAS's OpenMP build with the
# Fortran runtime it loads, GoogleTest's source tree (built there by that machine's own
# compiler, so no C++ ABI has to match) and the cuDNN frontend's headers (scripts/setup.sh put them
# in /usr/local/lib/myriad-deps; the GPU machine's cuDNN itself comes with its PyTorch). Nothing
# here is committed: the output folder is ignored.
#
# Usage: scripts/pack_gpu_deps.sh [output-dir]      (default: .gpu-deps in the repository)
# Output: <output-dir>/myriad-gpu-deps.tar.xz, unpacked by scripts/gpu_check.sh into a prefix:
#   include/{spdlog,fmt,cblas.h,openblas_config.h,...}  lib/{libopenblas.so*,libgfortran.so.5,
#   libquadmath.so.0}  src/googletest
# Needs: scripts/setup.sh run first (libspdlog-dev, libfmt-dev, libopenblas-openmp-dev,
# libgtest-dev — whose googletest package holds /usr/src/googletest).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTPUT="${1:-$ROOT/.gpu-deps}"
ARCH_LIB=/usr/lib/x86_64-linux-gnu
OPENBLAS_INCLUDE=/usr/include/x86_64-linux-gnu/openblas-openmp
OPENBLAS_LIB="$ARCH_LIB/openblas-openmp/libopenblas.so.0"

need() { [[ -e "$1" ]] || { echo "pack_gpu_deps: missing $1 ($2); run scripts/setup.sh" >&2; exit 1; }; }
need /usr/include/spdlog/spdlog.h libspdlog-dev
need /usr/include/fmt/format.h libfmt-dev
need "$OPENBLAS_INCLUDE/cblas.h" libopenblas-openmp-dev
need "$OPENBLAS_LIB" libopenblas0-openmp
need /usr/src/googletest/CMakeLists.txt googletest
need /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake nlohmann-json3-dev

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
prefix="$stage/prefix"
mkdir -p "$prefix/include" "$prefix/lib" "$prefix/src"
cp -a /usr/include/spdlog /usr/include/fmt /usr/include/nlohmann "$prefix/include/"
mkdir -p "$prefix/share/cmake"
cp -a /usr/share/cmake/nlohmann_json "$prefix/share/cmake/"  # its config finds include/ three levels up
cp -a "$OPENBLAS_INCLUDE"/*.h "$prefix/include/"
cp -L "$OPENBLAS_LIB" "$prefix/lib/libopenblas.so.0"
ln -s libopenblas.so.0 "$prefix/lib/libopenblas.so"
# What libopenblas loads beyond libc/libm/libgomp (libgomp comes with the machine's compiler).
for library in libgfortran.so.5 libquadmath.so.0; do
  need "$ARCH_LIB/$library" "$library"
  cp -L "$ARCH_LIB/$library" "$prefix/lib/$library"
done
cp -a /usr/src/googletest "$prefix/src/googletest"
if [[ -f /usr/local/lib/myriad-deps/cudnn-frontend/include/cudnn_frontend.h ]]; then
  mkdir -p "$prefix/cudnn-frontend"
  cp -a /usr/local/lib/myriad-deps/cudnn-frontend/include "$prefix/cudnn-frontend/"
fi
{
  echo "packed $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  dpkg-query -W -f='${Package} ${Version}\n' libspdlog-dev libfmt-dev nlohmann-json3-dev libopenblas0-openmp \
    googletest libgfortran5 2>/dev/null || true
} >"$prefix/PACKED"

mkdir -p "$OUTPUT"
archive="$OUTPUT/myriad-gpu-deps.tar.xz"
tar -C "$stage" -cJf "$archive.tmp" prefix
mv "$archive.tmp" "$archive"
echo "pack_gpu_deps: $archive ($(du -h "$archive" | cut -f1); unpacked $(du -sh "$prefix" | cut -f1))"
