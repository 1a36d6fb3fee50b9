"""A scheduler hook: watches coronerd and drains the hosts it flags, once each.

    python -m coroner_client.drain --address coronerd:7070 [--scheduler slurm|kubernetes] [--execute]

Every ``--interval`` seconds it lists the jobs that failed since the last round (one line each:
who failed first, where, why) and the suspect hosts (``Client.suspects``). For each flagged host
(or a host with a flagged GPU) it has not handled before, it prints the drain command, or with
``--execute`` runs it:

    slurm:      scontrol update nodename=HOST state=drain reason="coroner: ..."
    kubernetes: kubectl cordon HOST

Dry run is the default. A host is handled once per process, and once for good with ``--state
FILE`` (a JSON list kept across restarts); a command that fails is tried again next round. Host
names come from logs, so a name that is not a plain host name is refused, and commands run
without a shell. Exit status: 0, or 2 when coronerd cannot be reached on the first round of
``--once``.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

from .client import Client
from .errors import CoronerError
from .model import Verdict

# RFC 1123 labels with dots; no leading '-' (it would read as an option of scontrol or kubectl).
HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})$")
REASON_CHARS = 120


def drain_command(scheduler, host, reason):
    """The argv that drains ``host`` under ``scheduler``."""
    if scheduler == "slurm":
        return ["scontrol", "update", f"nodename={host}", "state=drain", f"reason={reason}"]
    if scheduler == "kubernetes":
        return ["kubectl", "cordon", host]
    raise ValueError(f"unknown scheduler {scheduler!r}: slurm or kubernetes")


def reason_of(suspect):
    """The drain reason Slurm records: coroner's, on one line, bounded."""
    what = f"GPU {suspect.gpu}: " if suspect.gpu else ""
    text = " ".join(f"coroner: {what}{suspect.reason}".split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def plan(suspects, handled, scheduler):
    """What to drain now: (host, argv) for each flagged host not handled yet, once per host
    (its GPU suspects fold into it), in coroner's order; and the names refused."""
    actions, refused, seen = [], [], set(handled)
    for s in suspects:
        if not s.flagged or s.host in seen:
            continue
        seen.add(s.host)
        if not HOST_NAME.match(s.host):
            refused.append(s.host)
            continue
        actions.append((s.host, drain_command(scheduler, s.host, reason_of(s))))
    return actions, refused


class State:
    """The hosts handled so far; with a path, kept in that JSON file across restarts."""

    def __init__(self, path=None):
        self.path = path
        self.hosts = set()
        if path and os.path.exists(path):
            with open(path) as f:
                self.hosts = set(json.load(f).get("drained", []))

    def add(self, host):
        self.hosts.add(host)
        if self.path:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump({"drained": sorted(self.hosts)}, f)
            os.replace(tmp, self.path)


def say(text):
    print(text, flush=True)


def one_round(client, args, state, seen_jobs, since):
    for job in client.list_jobs(verdict=Verdict.FAILED, since=since):
        if job.job_id in seen_jobs:
            continue
        seen_jobs.add(job.job_id)
        culprit = client.report(job.job_id).culprit
        if culprit is not None:
            rank = "rank unknown" if culprit.rank is None else f"rank {culprit.rank}"
            say(f"job {job.job_id} failed: {culprit.fault_class.value} on {culprit.host or 'an unknown host'} ({rank}): {culprit.reason}")
    actions, refused = plan(client.suspects(), state.hosts, args.scheduler)
    for host in refused:
        say(f"refused to drain {host!r}: not a plain host name")
    for host, argv in actions:
        command = shlex.join(argv)
        if not args.execute:
            say(f"dry run: would drain {host}: {command}")
            state.add(host)
            continue
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode == 0:
            say(f"drained {host}: {command}")
            state.add(host)
        else:
            say(f"could not drain {host} (exit {done.returncode}): {command}: {done.stderr.strip()}; trying again next round")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m coroner_client.drain", description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default=os.environ.get("CORONER_SERVER", "127.0.0.1:7070"), help="coronerd's gRPC address (CORONER_SERVER)")
    p.add_argument("--token", default=os.environ.get("CORONER_TOKEN"), help="the read token (CORONER_TOKEN)")
    p.add_argument("--ca", default=os.environ.get("CORONER_TLS_CA"), help="PEM of the CA for https:// (CORONER_TLS_CA)")
    p.add_argument("--scheduler", choices=["slurm", "kubernetes"], default="slurm")
    p.add_argument("--execute", action="store_true", help="run the drain commands (default: print them)")
    p.add_argument("--state", help="JSON file of the hosts already handled, kept across restarts")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between rounds (default 30)")
    p.add_argument("--lookback", type=float, default=3600.0, help="on the first round, failed jobs of this many seconds back (default 3600)")
    p.add_argument("--once", action="store_true", help="one round, then exit")
    args = p.parse_args(argv)

    state = State(args.state)
    seen_jobs = set()
    since = time.time() - args.lookback
    with Client(args.address, token=args.token, ca=args.ca) as client:
        while True:
            started = time.time()
            try:
                one_round(client, args, state, seen_jobs, since)
                since = started
            except CoronerError as e:
                say(f"coronerd: {e}")
                if args.once:
                    return 2
            if args.once:
                return 0
            try:
                time.sleep(args.interval)
            except KeyboardInterrupt:
                return 0


if __name__ == "__main__":
    sys.exit(main())
