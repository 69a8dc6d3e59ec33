#!/usr/bin/env bash
# A live Slurm on this one machine, for the tests and for trying the Slurm recipe
# (docs/cluster.md): munged, slurmctld and slurmd on loopback, configured in a folder of its own
# (nothing under /etc/slurm is touched; clients find it through SLURM_CONF).
#
#   scripts/slurm_local.sh start DIR   write DIR/slurm.conf, start the daemons, wait for the node
#   scripts/slurm_local.sh stop DIR    stop them (jobs are killed) and leave DIR's logs
#   scripts/slurm_local.sh env DIR     print `export SLURM_CONF=...` for a shell
#
# The cluster: one node (this host and its CPUs; no GPUs: job scripts for it use CPU ranks,
# `myriad sbatch --gpus-per-node 0 --tasks-per-node N`) in three partitions over it: `low`
# (PriorityTier 1) and `mid` (2), preempted with PreemptMode=REQUEUE after GraceTime $GRACE_S
# seconds of SIGTERM by any higher tier, and `high` (3, never preempted). Needs root (slurmd
# runs jobs as their users) and Debian's slurm-wlm and munge (scripts/setup.sh installs them);
# says why and exits 3 when it cannot run here. Ports: $MYRIAD_SLURM_PORT (slurmctld, default 6817) and the next one.
set -euo pipefail

command=${1:-}
dir=${2:-}
if [ -z "$command" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop|env DIR" >&2
  exit 2
fi
GRACE_S=${MYRIAD_SLURM_GRACE_S:-20}
port=${MYRIAD_SLURM_PORT:-6817}

cannot_run() {
  echo "slurm_local: cannot run a local Slurm here: $*" >&2
  exit 3
}

start() {
  [ "$(id -u)" = 0 ] || cannot_run "it needs root (slurmd starts jobs as their users)"
  for program in munged slurmctld slurmd sbatch; do
    command -v "$program" > /dev/null || PATH=$PATH:/usr/sbin command -v "$program" > /dev/null ||
      cannot_run "$program is missing (apt-get install slurm-wlm munge; scripts/setup.sh does it)"
  done
  export PATH=$PATH:/usr/sbin
  mkdir -p "$dir"/state "$dir"/spool "$dir"/munge "$dir"/run
  dir=$(cd "$dir" && pwd)
  local host cpus memory
  host=$(hostname -s)
  cpus=$(nproc)
  memory=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)

  # munge: a key of this cluster's own and a socket in DIR (a system munged is left alone). It runs
  # as root (--force): every client here is root, and DIR may lie below folders only root can
  # enter (pytest's temporary folders are 0700).
  if [ ! -s "$dir/munge/munge.key" ]; then
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 0700 "$dir/munge"
  chmod 0400 "$dir/munge/munge.key"
  local socket="$dir/run/munge.socket"
  if ! pgrep -f "munged.*$socket" > /dev/null; then
    munged --force --key-file="$dir/munge/munge.key" --socket="$socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
      --seed-file="$dir/munge/munged.seed" || cannot_run "munged did not start (see $dir/munge/munged.log)"
  fi

  cat > "$dir/slurm.conf" << EOF
# Written by scripts/slurm_local.sh: one node on loopback, three partitions, preemption by partition.
ClusterName=myriadlocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
Waittime=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=low Nodes=$host Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=$GRACE_S MaxTime=INFINITE State=UP
PartitionName=mid Nodes=$host PriorityTier=2 PreemptMode=REQUEUE GraceTime=$GRACE_S MaxTime=INFINITE State=UP
PartitionName=high Nodes=$host PriorityTier=3 PreemptMode=OFF MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$dir/slurm.conf"
  if ! pgrep -f "slurmctld -f $dir/slurm.conf" > /dev/null; then
    slurmctld -f "$dir/slurm.conf" -i || cannot_run "slurmctld did not start (see $dir/slurmctld.log)"
  fi
  if ! pgrep -f "slurmd -f $dir/slurm.conf" > /dev/null; then
    slurmd -f "$dir/slurm.conf" -N "$host" || cannot_run "slurmd did not start (see $dir/slurmd.log)"
  fi
  # The node is up once sinfo reports it idle (or mixed/allocated when jobs were restored).
  for _ in $(seq 1 60); do
    if sinfo -h -N -o '%T' 2> /dev/null | grep -Eq '^(idle|mixed|allocated)'; then
      echo "slurm_local: up in $dir (SLURM_CONF=$dir/slurm.conf; node $host, $cpus CPUs, partitions low, mid, high)"
      return 0
    fi
    sleep 0.5
  done
  cannot_run "the node did not come up in 30 s: $(sinfo -h -N -o '%T %E' 2>&1 | head -1) (see $dir/slurmctld.log)"
}

stop() {
  dir=$(cd "$dir" 2> /dev/null && pwd) || return 0
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    if [ -s "$pidfile" ]; then kill "$(cat "$pidfile")" 2> /dev/null || true; fi
  done
  for _ in $(seq 1 40); do
    pgrep -f "(slurmctld|slurmd) -f $dir/slurm.conf" > /dev/null || break
    sleep 0.25
  done
  pkill -9 -f "(slurmctld|slurmd) -f $dir/slurm.conf" 2> /dev/null || true
  # Job steps slurmd started (slurmstepd and their ranks) end with it.
  pkill -9 -f "slurmstepd.*" 2> /dev/null || true
}

case "$command" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$(cd "$dir" && pwd)/slurm.conf" ;;
  *)
    echo "usage: $0 start|stop|env DIR" >&2
    exit 2
    ;;
esac
