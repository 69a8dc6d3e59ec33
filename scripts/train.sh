#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds, and launches the training
# driver under mpirun. Arguments after the script are passed to python/train.py.
#   NP: number of ranks, all data parallel (default 2; parallel.dp defaults to the world size over
#       the model-parallel degrees, the global batch stays the config's). CONFIG: YAML config (default configs/gpt2_tiny.yaml).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
NP="${NP:-2}"
CONFIG="${CONFIG:-$ROOT/configs/gpt2_tiny.yaml}"
# Threads per rank: the cores shared out between the ranks (at least 1), unless set by the caller;
# --bind-to none lets a rank's OpenMP threads use more than the one core OpenMPI would bind it to.
THREADS="${OMP_NUM_THREADS:-$(( $(nproc) / NP > 0 ? $(nproc) / NP : 1 ))}"
MPI_FLAGS=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS="$THREADS" -x PYTHONPATH="$ROOT/python")
if [ "$(id -u)" -eq 0 ]; then MPI_FLAGS+=(--allow-run-as-root); fi
exec mpirun -np "$NP" "${MPI_FLAGS[@]}" python3 "$ROOT/python/train.py" --config "$CONFIG" "$@"
