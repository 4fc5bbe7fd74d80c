#!/usr/bin/env bash
# A one-node SLURM on this machine, for tests/integration/slurm: munge, slurmctld and slurmd.
#
#   sudo bash tests/integration/slurm/setup.sh     # as root; idempotent, quick when already up
#
# Installs Debian's slurm-wlm and munge if missing, writes /etc/slurm/slurm.conf for one node
# (this host's short name, its CPU count, a small RealMemory, no cgroups: proctrack/linuxproc,
# task/none, so it runs in a container), keeps state, spool and logs under $SLURM_TEST_DIR
# (default /var/tmp/tokensweep-slurm), starts the daemons that are not running and waits until
# `sinfo` shows the node idle. Exits non-zero with one line saying why when it cannot.
set -uo pipefail

DIR=${SLURM_TEST_DIR:-/var/tmp/tokensweep-slurm}
CONF=/etc/slurm/slurm.conf
WAIT_S=${SLURM_SETUP_WAIT_S:-60}

die() { echo "slurm setup: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 -qq update >/dev/null 2>&1 || true
    apt-get -o DPkg::Lock::Timeout=600 -qq install -y --no-install-recommends slurm-wlm munge \
        >"${TMPDIR:-/tmp}/tokensweep-slurm-apt.log" 2>&1 \
        || die "apt-get install slurm-wlm munge failed (see ${TMPDIR:-/tmp}/tokensweep-slurm-apt.log)"
fi

NODE=$(hostname -s)
CPUS=$(nproc)
mkdir -p "$DIR"/{state,spool,log} /etc/slurm /run/munge /var/log/munge /var/lib/munge /etc/munge

# munge: a key, then the daemon (as root it needs --force; its socket is the default one)
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    # the unprivileged munge user when it exists, else root with --force
    if id munge >/dev/null 2>&1; then
        chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
        runuser -u munge -- munged >/dev/null 2>&1 || munged --force >/dev/null 2>&1
    else
        munged --force >/dev/null 2>&1
    fi
    for _ in $(seq 20); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 || die "munged does not answer (see /var/log/munge/munged.log)"
fi

WANT=$(cat <<EOF
# written by tokensweep tests/integration/slurm/setup.sh: one node, no cgroups
ClusterName=tokensweep
SlurmctldHost=$NODE(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=60
KillWait=5
InactiveLimit=0
MinJobAge=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
)
if [ "$(cat "$CONF" 2>/dev/null)" != "$WANT" ]; then
    echo "$WANT" >"$CONF"
    CHANGED=1   # daemons started with another configuration must restart
fi

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ -n "${CHANGED:-}" ]; then
    for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid"; do
        running "$pidfile" && kill "$(cat "$pidfile")" && sleep 1
    done
fi
running "$DIR/slurmctld.pid" || slurmctld || die "slurmctld did not start (see $DIR/log/slurmctld.log)"
running "$DIR/slurmd.pid" || slurmd || die "slurmd did not start (see $DIR/log/slurmd.log)"

deadline=$((SECONDS + WAIT_S))
while [ $SECONDS -lt $deadline ]; do
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -1)
    case "$state" in
        idle|mixed|allocated) echo "slurm setup: node $NODE is $state ($CPUS CPUs, partition debug)"; exit 0 ;;
        drain*|down*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 ;;
    esac
    sleep 1
done
die "node $NODE not idle after ${WAIT_S} s (sinfo says '${state:-nothing}'; see $DIR/log/)"
