#!/usr/bin/env bash
# A real two-node SLURM cluster on one Linux machine, for trying `cluster=slurm` (issue 24):
# Debian's slurm-wlm and munge, each "node" a network namespace with a hostname of its own
# (UTS namespace) and an /etc/hosts that names both (mount namespace), joined by a veth pair.
#
#   sudo scripts/slurm-two-nodes.sh up   [DIR]   # DIR (default /tmp/sporeflow-slurm): conf, state, logs
#   sudo scripts/slurm-two-nodes.sh run  [DIR] -- COMMAND...   # COMMAND on node0 (sbatch, srun, python train.py -m ...)
#   sudo scripts/slurm-two-nodes.sh run  [DIR] --node=1 -- COMMAND...   # on node1 (a job started by hand)
#   sudo scripts/slurm-two-nodes.sh server [DIR] -- PORT   # an MLflow server on node0:PORT (mlflow from PATH;
#                                                           # store DIR/mlflow.db), for tracking.uri=http://10.77.0.1:PORT
#   sudo scripts/slurm-two-nodes.sh down [DIR]
#   sudo scripts/slurm-two-nodes.sh stop-node [DIR] -- 1    # node 1 loses power: every process in it killed
#   sudo scripts/slurm-two-nodes.sh start-node [DIR] -- 1   # its slurmd again (ReturnToService=2: it rejoins)
#
# node0 (10.77.0.1) runs slurmctld and a slurmd, node1 (10.77.0.2) a slurmd; both nodes see
# this machine's filesystem, as cluster nodes see a shared one. Servers a job must reach (an
# MLflow server) bind node0's address. Needs root, `ip`, `unshare`; no cgroup plugins (the
# process tracking is proctrack/linuxproc). Accounting: slurmdbd on node0 with a MariaDB of its
# own (data in DIR/mysql, listening on node0's loopback only), so that `sacct` - and submitit,
# which asks sacct how a job ended - sees jobs that end without a result (scancel, TIMEOUT,
# NODE_FAIL). A lost node ends its job (JobRequeue=0) instead of requeueing it.
# tests/e2e/test_slurm_cluster.py runs it.
set -euo pipefail
cmd=${1:?up, run or down}; shift
DIR=/tmp/sporeflow-slurm
if [ $# -gt 0 ] && [ "$1" != "--" ]; then DIR=$1; shift; fi
NS=(sfslurm0 sfslurm1); ADDR=(10.77.0.1 10.77.0.2); NODE=(node0 node1)
export SLURM_CONF=$DIR/slurm.conf

down() {
  # every process of both nodes (daemons, database, jobs): TERM, up to 10 s, then KILL
  pids() { for ns in "${NS[@]}"; do ip netns pids "$ns" 2>/dev/null || true; done; }
  pids | xargs -r kill 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(pids)" ] && break; sleep 0.2; done
  pids | xargs -r kill -9 2>/dev/null || true
  for ns in "${NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done  # the veth pair goes with them
  if [ -f "$DIR/munged.started" ]; then  # munge as it was: stopped when `up` started it
    pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
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
  for tool in slurmctld slurmd slurmdbd munged mariadbd mariadb-install-db sacctmgr; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install slurm-wlm slurmdbd munge mariadb-server" >&2; return 2; }
  done
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
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=node0
JobRequeue=0
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdTimeout=10
MinJobAge=300
KillWait=10
NodeName=node0 NodeAddr=${ADDR[0]} CPUs=$cores RealMemory=$mem State=UNKNOWN
NodeName=node1 NodeAddr=${ADDR[1]} CPUs=$cores RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=node0,node1 Default=YES MaxTime=INFINITE State=UP
CONF
  # slurmd looks for cgroups even with proctrack/linuxproc; the v1 hierarchy, nothing constrained
  printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' > "$DIR/cgroup.conf"
  if ! munge -n < /dev/null 2>/dev/null | unmunge > /dev/null 2>&1; then  # no munged answers
    mkdir -p /run/munge && chown munge:munge /run/munge
    [ -f /etc/munge/munge.key ] || mungekey --create
    runuser -u munge -- munged
    touch "$DIR/munged.started"
  fi
  accounting
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

accounting() {  # MariaDB on node0's loopback, slurmdbd beside it, the cluster registered
  rm -rf "$DIR/mysql"
  mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root --skip-test-db \
    --auth-root-authentication-method=socket > "$DIR/log/mariadb-install.log" 2>&1
  in_node 0 setsid mariadbd --no-defaults --datadir="$DIR/mysql" --user=root \
    --bind-address=127.0.0.1 --port=3306 --socket="$DIR/mysqld.sock" --pid-file="$DIR/mysqld.pid" \
    --log-error="$DIR/log/mariadb.log" < /dev/null > /dev/null 2>&1 &
  for _ in $(seq 60); do [ -S "$DIR/mysqld.sock" ] && break; sleep 0.2; done
  mariadb --no-defaults --socket="$DIR/mysqld.sock" -u root -e \
    "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  cat > "$DIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=node0
DbdAddr=${ADDR[0]}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/slurmdbd.pid
CONF
  chmod 600 "$DIR/slurmdbd.conf"
  in_node 0 slurmdbd
  for _ in $(seq 40); do
    in_node 0 sacctmgr -i add cluster sporeflow > /dev/null 2>&1 && return 0
    sleep 0.25
  done
  echo "slurmdbd did not come up: see $DIR/log/slurmdbd.log" >&2; return 1
}

case $cmd in
  up) up ;;
  down) down ;;
  run) node=0; case ${1:-} in --node=*) node=${1#--node=}; shift ;; esac
    [ "${1:-}" = "--" ] && shift; in_node "$node" "$@" ;;
  server) [ "${1:-}" = "--" ] && shift
    # MLflow's job runner (GenAI jobs, idle consumers polling) is not needed: off, as sporeflow's servers
    in_node 0 env MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow server --backend-store-uri "sqlite:///$DIR/mlflow.db" \
      --artifacts-destination "$DIR/artifacts" --serve-artifacts \
      --host "${ADDR[0]}" --port "${1:?which port}" --workers 1 ;;
  stop-node) [ "${1:-}" = "--" ] && shift; ip netns pids "${NS[${1:?which node}]}" | xargs -r kill -9 ;;
  start-node) [ "${1:-}" = "--" ] && shift; i=${1:?which node}
    in_node "$i" env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT slurmd -f "$SLURM_CONF" -N "${NODE[$i]}" ;;
  *) echo "usage: $0 up|run|server|down|stop-node|start-node [DIR] [-- COMMAND... | -- PORT | -- NODE]" >&2; exit 2 ;;
esac
