#!/bin/bash
# Slurm Epilog for coroner (slurm.conf: Epilog=/etc/slurm/epilog.d/coroner.sh, run by slurmd as
# root on each node after a job ends): sends what the job's agents could not deliver before they
# exited (coronerd was away, the linger ran out, an agent was killed) with
# `coroner-agent ship --spool-dir DIR`, then gives up spool files nobody could deliver for
# CORONER_SPOOL_KEEP_DAYS days (7), so the node's disk stays bounded.
#
# Settings come from CORONER_SLURM_CONF (default /etc/coroner/slurm.env, readable by root only,
# since it holds the write token):
#   CORONER_SERVER=http://coroner-0:7070,http://coroner-1:7070
#   CORONER_TOKEN=<write token>
#   CORONER_SPOOL_DIR=/var/spool/coroner     # what the jobs use (deploy/slurm/train.sbatch)
#   CORONER_AGENT=/usr/local/bin/coroner-agent
#
# Never fails: an Epilog that exits non-zero makes Slurm drain the node. Spools of agents that
# still run (another job's, on a shared node) are left alone; a spool that could not be sent
# stays for the next job's epilog. Nothing is counted twice: coronerd drops lines it already has.
conf=${CORONER_SLURM_CONF:-/etc/coroner/slurm.env}
# shellcheck disable=SC1090
[ -r "$conf" ] && . "$conf"
export CORONER_SERVER CORONER_TOKEN CORONER_TLS_CA
spool=${CORONER_SPOOL_DIR:-/var/spool/coroner}
agent=${CORONER_AGENT:-coroner-agent}
keep_days=${CORONER_SPOOL_KEEP_DAYS:-7}
[ -d "$spool" ] || exit 0

# Bounded: a server that accepts connections and then says nothing must not hold the node.
if ! timeout "${CORONER_SHIP_TIMEOUT:-120}" "$agent" ship --spool-dir "$spool" --quiet; then
  echo "coroner epilog: job ${SLURM_JOB_ID:-?}: some spools in $spool were not sent; the next epilog tries again" >&2
fi

find "$spool" -mindepth 1 -type f -mtime +"$keep_days" -delete 2>/dev/null
find "$spool" -mindepth 1 -type d -empty -mmin +60 -delete 2>/dev/null
exit 0
