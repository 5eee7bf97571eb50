#!/usr/bin/env bash
# A real two-node SLURM cluster on one Linux machine, for trying `cluster=slurm` (issue 24):
# Debian's slurm-wlm and munge, each "node" a network namespace with a hostname of its own
# (UTS namespace) and an /etc/hosts that names both (mount namespace), joined by a veth pair.
#
#   sudo scripts/slurm-two-nodes.sh up   [DIR]   # DIR (default /tmp/sporeflow-slurm): conf, state, logs
#   sudo scripts/slurm-two-nodes.sh run  [DIR] -- COMMAND...   # COMMAND on node0 (sbatch, srun, python train.py -m ...)
#   sudo scripts/slurm-two-nodes.sh down [DIR]
#
# node0 (10.77.0.1) runs slurmctld and a slurmd, node1 (10.77.0.2) a slurmd; both nodes see
# this machine's filesystem, as cluster nodes see a shared one. Servers a job must reach (an
# MLflow server) bind node0's address. Needs root, `ip`, `unshare`; no cgroup plugins (the
# process tracking is proctrack/linuxproc). No accounting (slurmdbd): `sacct` answers nothing,
# so submitit learns that a job ended only from its result file (a job that dies without one,
# scancel or a time limit, is not seen to end). tests/e2e/test_slurm_cluster.py runs it.
set -euo pipefail
cmd=${1:?up, run or down}; shift
DIR=/tmp/sporeflow-slurm
if [ $# -gt 0 ] && [ "$1" != "--" ]; then DIR=$1; shift; fi
NS=(sfslurm0 sfslurm1); ADDR=(10.77.0.1 10.77.0.2); NODE=(node0 node1)
export SLURM_CONF=$DIR/slurm.conf

down() {
  for pidfile in "$DIR"/slurmd-*.pid "$DIR"/slurmctld.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 1
  for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done  # the veth pair goes with them
  if [ -f "$DIR/munged.started" ]; then  # munge as it was: stopped when `up` started it
    kill "$(cat /run/munge/munged.pid 2>/dev/null)" 2>/dev/null || true
    rm -f "$DIR/munged.started"
  fi
}

in_node() {  # in_node I COMMAND...: COMMAND on node I (its network, hostname and /etc/hosts)
  local i=$1; shift
  ip netns exec "${NS[$i]}" unshare --uts --mount sh -c \
    'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' \
    "$DIR/hosts" "${NODE[$i]}" "$@"
}

up() {
  down
  mkdir -p "$DIR"/state "$DIR"/spool "$DIR"/log
  ip netns add "${NS[0]}"; ip netns add "${NS[1]}"
  ip link add sfslurmv0 type veth peer name sfslurmv1
  for i in 0 1; do
    ip link set "sfslurmv$i" netns "${NS[$i]}"
    ip -n "${NS[$i]}" addr add "${ADDR[$i]}/24" dev "sfslurmv$i"
    ip -n "${NS[$i]}" link set "sfslurmv$i" up
    ip -n "${NS[$i]}" link set lo up
  done
  printf '127.0.0.1 localhost\n%s node0\n%s node1\n' "${ADDR[0]}" "${ADDR[1]}" > "$DIR/hosts"
  # the machine's cores (nproc would honour a caller's OMP_NUM_THREADS, and slurmd too)
  cores=$(getconf _NPROCESSORS_ONLN); mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10))
  cat > "$SLURM_CONF" <<CONF
ClusterName=sporeflow
SlurmctldHost=node0(${ADDR[0]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdTimeout=30
MinJobAge=300
KillWait=10
NodeName=node0 NodeAddr=${ADDR[0]} CPUs=$cores RealMemory=$mem State=UNKNOWN
NodeName=node1 NodeAddr=${ADDR[1]} CPUs=$cores RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=node0,node1 Default=YES MaxTime=INFINITE State=UP
CONF
  # slurmd looks for cgroups even with proctrack/linuxproc; the v1 hierarchy, nothing constrained
  printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' > "$DIR/cgroup.conf"
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    [ -f /etc/munge/munge.key ] || mungekey --create
    runuser -u munge -- munged
    touch "$DIR/munged.started"
  fi
  in_node 0 env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT slurmctld -f "$SLURM_CONF"
  in_node 0 env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT slurmd -f "$SLURM_CONF" -N node0
  in_node 1 env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT slurmd -f "$SLURM_CONF" -N node1
  for _ in $(seq 60); do
    if [ "$(in_node 0 sinfo -h -o '%T %D' 2>/dev/null)" = "idle 2" ]; then
      echo "two nodes idle: SLURM_CONF=$SLURM_CONF $0 run $DIR -- sinfo"; return 0
    fi
    sleep 1
  done
  echo "the nodes did not come up: see $DIR/log/" >&2; return 1
}

case $cmd in
  up) up ;;
  down) down ;;
  run) [ "${1:-}" = "--" ] && shift; in_node 0 "$@" ;;
  *) echo "usage: $0 up|run|down [DIR] [-- COMMAND...]" >&2; exit 2 ;;
esac
