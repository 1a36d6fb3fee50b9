#!/usr/bin/env python3
"""A stand-in for `torchrun` (torch.distributed.run) for tests on machines without PyTorch.

It reproduces what coroner reads of torchrun, taken from PyTorch's sources (2.5):
- the worker environment, `torch/distributed/elastic/agent/server/local_elastic_agent.py`
  (`_start_workers`): RANK, LOCAL_RANK, GROUP_RANK, ROLE_RANK, ROLE_NAME, LOCAL_WORLD_SIZE,
  WORLD_SIZE, GROUP_WORLD_SIZE, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
  TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
  TORCHELASTIC_USE_AGENT_STORE, TORCH_NCCL_ASYNC_ERROR_HANDLING, OMP_NUM_THREADS;
- the rendezvous result, `torch/distributed/elastic/agent/server/api.py`
  (`SimpleElasticAgent._rendezvous`), logged at INFO, and the restart line of `_invoke_run`
  (`[default] Worker group FAILED. N/M attempts left; will restart worker group`);
- global ranks (`_assign_worker_ranks`): a node's workers are numbered after those of every node
  whose group rank is lower;
- a worker's end, `torch/distributed/elastic/multiprocessing/api.py` (`failed (exitcode: N)
  local_rank: L (pid: P) of binary: ...`, `Sending process P closing signal SIGTERM`) and the
  `ChildFailedError` table of `torch/distributed/elastic/multiprocessing/errors/__init__.py`;
- `--tee 3` prefixes each worker line with `[<role><local rank>]:` (`multiprocessing/tail_log.py`);
- the log records' shape, `I1201 10:00:00.100000 <pid> torch/.../api.py:<line>] message`, one
  header per line of a record (PyTorch >= 2.4), shown when LOGLEVEL is INFO (torch's default
  is WARNING: `torch/distributed/elastic/utils/logging.py`).

Rendezvous: like c10d's, the nodes get their group ranks in the order they arrive, but through a
folder instead of a TCP store: `--rdzv-endpoint` names a folder shared by the launchers; round r
of the rendezvous is `<folder>/round<r>/`, where each node claims the first free `node<k>` with
O_EXCL (arrival order) and waits until `--nnodes` nodes are in. A node whose workers failed with
restarts left writes `<folder>/round<r>/failed`, which tells the others to stop their workers and
join round r+1 (what c10d's `num_nodes_waiting` does).

The test's own variable RING_DIR (examples/ring_job.py) is given a fresh subfolder per round, so a
restarted ring does not meet the previous round's ports. Standard library only.
"""
import argparse
import datetime
import os
import signal
import subprocess
import sys
import threading
import time

ROLE = "default"
PID = os.getpid()
# The threads copying the workers' output; like torchrun's tail_log threads, they are finished
# before the workers' group is started again.
TEES = []


def log(level, where, message):
    """One record in torch's elastic logging shape, a header on each of its lines."""
    if level == "I" and os.environ.get("LOGLEVEL", "WARNING").upper() not in ("INFO", "DEBUG"):
        return
    now = datetime.datetime.now()
    head = f"{level}{now:%m%d %H:%M:%S}.{now.microsecond:06d} {PID} torch/distributed/{where}] "
    for line in message.split("\n"):
        sys.stderr.write(head + line + "\n")
    sys.stderr.flush()


def claim_node(folder, nnodes, timeout):
    """Joins a round: the first free node slot in arrival order, then waits for the others."""
    os.makedirs(folder, exist_ok=True)
    group_rank = None
    for k in range(nnodes):
        try:
            fd = os.open(os.path.join(folder, f"node{k}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, f"{os.uname().nodename} {PID}".encode())
            os.close(fd)
            group_rank = k
            break
        except FileExistsError:
            continue
    if group_rank is None:
        sys.exit(f"torchrun stand-in: rendezvous {folder} is full ({nnodes} nodes)")
    deadline = time.time() + timeout
    while not all(os.path.exists(os.path.join(folder, f"node{k}")) for k in range(nnodes)):
        if time.time() > deadline:
            sys.exit(f"torchrun stand-in: rendezvous {folder} timed out waiting for {nnodes} nodes")
        time.sleep(0.05)
    return group_rank


def start_workers(args, group_rank, restart_count, round_dir):
    world = args.nnodes * args.nproc_per_node
    base = group_rank * args.nproc_per_node
    local, globals_ = list(range(args.nproc_per_node)), [base + i for i in range(args.nproc_per_node)]
    log("I", "elastic/agent/server/api.py:525",
        f"[{ROLE}] Rendezvous complete for workers. Result:\n"
        f"  restart_count={restart_count}\n  master_addr=127.0.0.1\n  master_port={args.master_port}\n"
        f"  group_rank={group_rank}\n  group_world_size={args.nnodes}\n  local_ranks={local}\n"
        f"  role_ranks={globals_}\n  global_ranks={globals_}\n  role_world_sizes={[world] * len(local)}\n"
        f"  global_world_sizes={[world] * len(local)}\n")
    log("I", "elastic/agent/server/api.py:670", f"[{ROLE}] Starting worker group")
    workers = []
    for lr in local:
        env = dict(os.environ)
        env.update({
            "RANK": str(base + lr), "LOCAL_RANK": str(lr), "GROUP_RANK": str(group_rank), "ROLE_RANK": str(base + lr),
            "ROLE_NAME": ROLE, "LOCAL_WORLD_SIZE": str(args.nproc_per_node), "WORLD_SIZE": str(world),
            "GROUP_WORLD_SIZE": str(args.nnodes), "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(args.master_port), "TORCHELASTIC_RESTART_COUNT": str(restart_count),
            "TORCHELASTIC_MAX_RESTARTS": str(args.max_restarts), "TORCHELASTIC_RUN_ID": args.rdzv_id,
            "TORCHELASTIC_USE_AGENT_STORE": "False", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        })
        if os.environ.get("RING_DIR"):
            env["RING_DIR"] = os.path.join(os.environ["RING_DIR"], f"round{restart_count}")
            os.makedirs(env["RING_DIR"], exist_ok=True)
        p = subprocess.Popen([sys.executable, "-u", args.script, *args.script_args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        workers.append((lr, base + lr, p))
        for pipe, out in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
            t = threading.Thread(target=tee, args=(pipe, out, f"[{ROLE}{lr}]:"), daemon=True)
            t.start()
            TEES.append(t)
    return workers


def tee(pipe, out, prefix):
    for raw in iter(pipe.readline, b""):
        out.write(prefix + raw.decode(errors="replace"))
        out.flush()


def stop(workers):
    for _, _, p in workers:
        if p.poll() is None:
            log("W", "elastic/multiprocessing/api.py:897", f"Sending process {p.pid} closing signal SIGTERM")
            p.send_signal(signal.SIGTERM)
    for _, _, p in workers:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    for t in TEES:
        t.join(timeout=10)
    TEES.clear()


def failure_table(script, failures, host):
    now = datetime.datetime.now().strftime("%Y-%m-%d_%H:%M:%S")
    rows = []
    for i, (lr, gr, p) in enumerate(failures):
        code = p.returncode
        tb = f"Signal {-code} ({signal.Signals(-code).name}) received by PID {p.pid}" if code < 0 else \
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        rows.append(f"[{i}]:\n  time      : {now}\n  host      : {host}\n  rank      : {gr} (local_rank: {lr})\n"
                    f"  exitcode  : {code} (pid: {p.pid})\n  error_file: <N/A>\n  traceback : {tb}")
    root, others = rows[0], rows[1:]
    bar, thin = "=" * 60, "-" * 60
    text = (f"torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n{bar}\n{script} FAILED\n{thin}\n"
            f"Failures:\n{chr(10).join(others) if others else '  <NO_OTHER_FAILURES>'}\n{thin}\n"
            f"Root Cause (first observed failure):\n{root}\n{bar}\n")
    sys.stderr.write(text)
    sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnodes", type=int, default=1)
    ap.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=int, default=1)
    ap.add_argument("--rdzv-backend", "--rdzv_backend", dest="rdzv_backend", default="c10d")
    ap.add_argument("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", required=True)
    ap.add_argument("--rdzv-id", "--rdzv_id", dest="rdzv_id", default="none")
    ap.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0)
    ap.add_argument("--tee", default="0")
    ap.add_argument("--master-port", dest="master_port", type=int, default=29500)
    ap.add_argument("script")
    ap.add_argument("script_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    host = os.uname().nodename
    restart_count = 0
    while True:
        round_dir = os.path.join(args.rdzv_endpoint, f"round{restart_count}")
        group_rank = claim_node(round_dir, args.nnodes, timeout=60)
        workers = start_workers(args, group_rank, restart_count, round_dir)
        failed_flag = os.path.join(round_dir, "failed")
        while True:
            time.sleep(0.05)
            done = [w for w in workers if w[2].poll() is not None]
            bad = [w for w in done if w[2].returncode != 0]
            if bad or os.path.exists(failed_flag):
                break
            if len(done) == len(workers):
                log("I", "elastic/agent/server/api.py:882", f"[{ROLE}] worker group successfully finished.")
                return 0
        first = min(bad, key=lambda w: w[0]) if bad else None
        if first is not None:
            log("E", "elastic/multiprocessing/api.py:869",
                f"failed (exitcode: {first[2].returncode}) local_rank: {first[0]} (pid: {first[2].pid}) of binary: {sys.executable}")
        remaining = args.max_restarts - restart_count
        if remaining > 0:
            open(failed_flag, "a").close()
            log("I", "elastic/agent/server/api.py:906",
                f"[{ROLE}] Worker group FAILED. {remaining}/{args.max_restarts} attempts left; will restart worker group")
            stop(workers)
            restart_count += 1
            continue
        stop(workers)
        if first is None:
            sys.stderr.write("torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n")
            return 1
        failed = [first] + [w for w in workers if w is not first and w[2].returncode not in (0, None)]
        failure_table(args.script, failed, host)
        return 1


if __name__ == "__main__":
    sys.exit(main())
