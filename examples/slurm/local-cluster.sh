#!/usr/bin/env bash
# A one-host Slurm (munged, slurmctld, slurmd) for trying the sbatch examples on one machine.
#
#   examples/slurm/local-cluster.sh start      # prints the SLURM_CONF line to export
#   eval "$(examples/slurm/local-cluster.sh env)"
#   sbatch --wait examples/slurm/critpath-1x2-cpu.sbatch
#   examples/slurm/local-cluster.sh stop       # stops what start started, removes its directory
#
# Needs root (slurmd starts job steps as the submitting user) and Debian's packages:
#   apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
# Nothing outside $CRITPATH_SLURM_DIR (default /tmp/critpath-slurm) is written: the daemons read
# this directory's slurm.conf and munge key, not /etc/slurm or /etc/munge, and a system munged
# or Slurm keeps running untouched. Start is idempotent (a running cluster is left as it is; a
# half-started one is stopped and started afresh). The one node is "localhost" at 127.0.0.1 and
# the controller is localhost(127.0.0.1), so every connection stays on loopback. Slurm has no
# setting for the address it listens on: slurmctld, slurmd and srun bind every address of their
# ports, and a request needs a credential from this cluster's own munge key.
set -euo pipefail

DIR=${CRITPATH_SLURM_DIR:-/tmp/critpath-slurm}
CTLD_PORT=${CRITPATH_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${CRITPATH_SLURMD_PORT:-6818}
# The node's CPUs as slurmd counts them (nproc would follow OMP_NUM_THREADS).
CPUS=${CRITPATH_SLURM_CPUS:-}
CLUSTER=critpath-local
# Written into slurm.conf: stop removes $DIR only when its slurm.conf carries this line, so a
# mistyped CRITPATH_SLURM_DIR is never deleted.
MARKER="# written by critpath examples/slurm/local-cluster.sh"
START_TIMEOUT_S=30

die() { echo "local-cluster: $*" >&2; exit 2; }

alive() {  # pid file, expected program name
    local pid
    [[ -s $1 ]] || return 1
    pid=$(<"$1")
    [[ -r /proc/$pid/comm && $(<"/proc/$pid/comm") == "$2" ]]
}

need_tools() {
    [[ $(id -u) == 0 ]] || die "run as root (slurmd starts each job step as the user who submitted it)"
    local missing=()
    for tool in munged mungekey slurmctld slurmd scontrol sinfo squeue scancel; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    ((${#missing[@]} == 0)) ||
        die "missing ${missing[*]}: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge"
}

write_config() {
    [[ -n $CPUS ]] || CPUS=$(slurmd -C | sed -n 's/^NodeName=.* CPUs=\([0-9]*\) .*/\1/p')
    [[ $CPUS =~ ^[0-9]+$ ]] || die "could not read this host's CPU count from slurmd -C; set CRITPATH_SLURM_CPUS"
    install -d -m 0755 "$DIR" "$DIR/munge" "$DIR/spool" "$DIR/state" "$DIR/log" "$DIR/run"
    mungekey --create --keyfile="$DIR/munge/munge.key" --force
    chmod 0600 "$DIR/munge/munge.key"
    cat >"$DIR/slurm.conf" <<EOF
$MARKER
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
MailProg=/bin/true
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
# No cgroups: containers often lack a writable cgroup tree, and one host needs no fencing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Without slurmdbd, sacct has nothing to read: each finished job's times and state are one line here.
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
# Job IDs go on from the clock: a fresh cluster starting again at 1 would reuse the examples'
# reports/slurm-<job id>, which critpath refuses to overwrite.
FirstJobId=$(($(date +%s) % 50000000 + 1))
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
MinJobAge=600
NodeName=localhost NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=60 State=UP
EOF
}

# Client commands, each bounded: a port held by something that is not this slurmctld accepts
# the connection and never answers.
slurm() { SLURM_CONF=$DIR/slurm.conf timeout 10 "$@"; }

ctld_up() { slurm scontrol ping 2>/dev/null | grep -q "is UP"; }

node_idle() { slurm sinfo -h -n localhost -o %t 2>/dev/null | grep -qx "idle"; }

cluster_up() {
    alive "$DIR/run/munged.pid" munged && alive "$DIR/run/slurmctld.pid" slurmctld &&
        alive "$DIR/run/slurmd.pid" slurmd && ctld_up
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

fail_start() {
    echo "local-cluster: $*; logs in $DIR/log:" >&2
    tail -n 20 "$DIR"/log/*.log >&2 || true
    cmd_stop >&2
    exit 1
}

wait_for() {  # daemon, test command...: until the test passes, while the daemon lives
    local daemon=$1 started=$SECONDS
    shift
    until "$@"; do
        if ! alive "$DIR/run/$daemon.pid" "$daemon" && ((SECONDS - started >= 2)); then
            fail_start "$daemon exited"
        fi
        ((SECONDS - started < START_TIMEOUT_S)) || fail_start "$daemon not ready after ${START_TIMEOUT_S}s"
        sleep 0.2
    done
}

cmd_env() { echo "export SLURM_CONF=$DIR/slurm.conf"; }

cmd_start() {
    need_tools
    if cluster_up; then
        echo "local-cluster: already running ($DIR)"
        cmd_env
        return 0
    fi
    [[ -e $DIR ]] && cmd_stop >/dev/null
    for port in "$CTLD_PORT" "$SLURMD_PORT"; do
        if port_busy "$port"; then
            die "port $port on 127.0.0.1 is in use (another Slurm?); set CRITPATH_SLURMCTLD_PORT and CRITPATH_SLURMD_PORT"
        fi
    done
    write_config
    munged --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" --pid-file="$DIR/run/munged.pid" \
        --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" || fail_start "munged did not start"
    wait_for munged alive "$DIR/run/munged.pid" munged
    slurmctld -f "$DIR/slurm.conf" || fail_start "slurmctld did not start"
    wait_for slurmctld ctld_up
    slurmd -f "$DIR/slurm.conf" -N localhost || fail_start "slurmd did not start"
    wait_for slurmd node_idle
    echo "local-cluster: up: node localhost (127.0.0.1), $CPUS CPUs, partition local, state in $DIR"
    cmd_env
}

stop_daemons() {  # names: signalled together, each takes about 2 s to exit
    local name pid pids=()
    for name in "$@"; do
        alive "$DIR/run/$name.pid" "$name" || continue
        pid=$(<"$DIR/run/$name.pid")
        kill -TERM "$pid"
        pids+=("$pid")
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do
            [[ -d /proc/$pid ]] || break
            sleep 0.1
        done
        if [[ -d /proc/$pid ]]; then kill -KILL "$pid" 2>/dev/null || true; fi
    done
}

cmd_stop() {
    [[ -e $DIR ]] || { echo "local-cluster: nothing to stop ($DIR does not exist)"; return 0; }
    [[ $(head -n 1 "$DIR/slurm.conf" 2>/dev/null) == "$MARKER" ]] ||
        die "$DIR/slurm.conf was not written by this script; not touching $DIR"
    if alive "$DIR/run/slurmctld.pid" slurmctld; then
        # Jobs first, so that no job step outlives its slurmd.
        slurm scancel --full --quiet --partition=local 2>/dev/null || true
        for _ in $(seq 50); do
            [[ -z $(slurm squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.2
        done
    fi
    stop_daemons slurmd slurmctld
    # Last: the Slurm daemons authenticate through it until they are gone.
    stop_daemons munged
    rm -rf "$DIR"
    echo "local-cluster: stopped; removed $DIR"
}

cmd_status() {
    if cluster_up; then
        slurm sinfo
        slurm squeue
    else
        echo "local-cluster: not running ($DIR)"
        return 1
    fi
}

case ${1:-} in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) die "usage: $0 start|stop|status|env" ;;
esac
