#!/bin/bash
# Slurm Prolog for coroner (slurm.conf: Prolog=/etc/slurm/prolog.d/coroner.sh, run by slurmd as
# root on each node before a job's first step): makes the node-local spool folder the agents
# write to, shared by every user like /tmp. Never fails the job: a Prolog that exits non-zero
# makes Slurm drain the node and requeue the job.
conf=${CORONER_SLURM_CONF:-/etc/coroner/slurm.env}
# shellcheck disable=SC1090
[ -r "$conf" ] && . "$conf"
spool=${CORONER_SPOOL_DIR:-/var/spool/coroner}
if ! { mkdir -p "$spool" && chmod 1777 "$spool"; }; then
  echo "coroner prolog: cannot make the spool folder $spool; agents will warn and run their jobs without it" >&2
fi
exit 0
