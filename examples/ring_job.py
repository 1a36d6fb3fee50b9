#!/usr/bin/env python3
"""A small multi-rank CPU "training" job for demos and tests: no GPU, no PyTorch, standard library only.

Every step, each rank computes a loss and the ranks sum it with a ring all-reduce over TCP on
127.0.0.1 (rank r listens on MASTER_PORT + r and sends to rank r+1), the way gloo's ring does.
One rank can be made to fail at a chosen step, and the others fail after it the way real jobs do:
its ring neighbour sees the connection close, the rest time out waiting.

Environment: RANK, WORLD_SIZE (as torchrun sets them; under srun, SLURM_PROCID and SLURM_NTASKS), MASTER_PORT (default 29600), RING_DIR, STEPS (8),
STEP_SECONDS (0.2), COLLECTIVE_TIMEOUT (10 s), FAULT_RANK, FAULT_STEP (3), FAULT_ATTEMPT (fail only in
the attempt whose TORCHELASTIC_RESTART_COUNT is this; default every attempt), and FAULT, one of:
  nan       raise ValueError("loss is not finite: nan at step N")
  exception raise RuntimeError with a shape error
  hang      stop making progress (sleep) without dying
  segv      die of SIGSEGV (faulthandler prints the stack)
  kill      die of SIGKILL (no last words)
  exit      exit with status 3 and no error line

With RING_DIR set, the ranks meet through files instead of MASTER_PORT: each listens on a port the
kernel picks and writes it to RING_DIR/rank<r>.port, so no port has to be free beforehand (tests).
"""
import faulthandler
import logging
import os
import signal
import socket
import struct
import sys
import time

RANK = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
WORLD = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
BASE_PORT = int(os.environ.get("MASTER_PORT", "29600"))
RING_DIR = os.environ.get("RING_DIR", "")
STEPS = int(os.environ.get("STEPS", "8"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.2"))
TIMEOUT = float(os.environ.get("COLLECTIVE_TIMEOUT", "10"))
FAULT = os.environ.get("FAULT", "")
FAULT_RANK = int(os.environ.get("FAULT_RANK", "-1"))
FAULT_STEP = int(os.environ.get("FAULT_STEP", "3"))
FAULT_ATTEMPT = os.environ.get("FAULT_ATTEMPT", "")
ATTEMPT = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")

log = logging.getLogger("train")
MESSAGE = struct.Struct("!Qd")


def connect_ring():
    """Listens for the previous rank, connects to the next; returns (to_next, from_prev)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0 if RING_DIR else BASE_PORT + RANK))
    server.listen(1)
    publish_port(server.getsockname()[1])
    nxt = (RANK + 1) % WORLD
    deadline = time.time() + 60
    while True:
        try:
            to_next = socket.create_connection(("127.0.0.1", port_of(nxt)), timeout=2)
            break
        except (OSError, ValueError):
            if time.time() > deadline:
                raise ConnectionError(f"rendezvous: rank {nxt} did not come up within 60 s")
            time.sleep(0.05)
    server.settimeout(60)
    from_prev, _ = server.accept()
    server.close()
    from_prev.settimeout(TIMEOUT)
    return to_next, from_prev


def publish_port(port):
    """With RING_DIR, tells the other ranks where this one listens (the file appears whole)."""
    if RING_DIR:
        path = os.path.join(RING_DIR, f"rank{RANK}.port")
        with open(path + ".tmp", "w") as f:
            f.write(str(port))
        os.rename(path + ".tmp", path)


def port_of(rank):
    """Where `rank` listens; ValueError (retried) while it has not said yet."""
    if not RING_DIR:
        return BASE_PORT + rank
    try:
        with open(os.path.join(RING_DIR, f"rank{rank}.port")) as f:
            return int(f.read())
    except FileNotFoundError:
        raise ValueError(f"rank {rank} has not published its port yet") from None


def recv_exact(sock, n, step, prev):
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except socket.timeout:
            raise TimeoutError(
                f"all_reduce at step {step}: no data from rank {prev} for {TIMEOUT:.0f} s"
            ) from None
        if not chunk:
            raise ConnectionError(f"all_reduce at step {step}: rank {prev} closed the connection")
        data += chunk
    return data


def all_reduce(value, step, to_next, from_prev):
    """Ring all-reduce of one float: WORLD-1 rounds of pass-along."""
    prev = (RANK - 1) % WORLD
    total, passing = value, value
    for _ in range(WORLD - 1):
        to_next.sendall(MESSAGE.pack(step, passing))
        _, passing = MESSAGE.unpack(recv_exact(from_prev, MESSAGE.size, step, prev))
        total += passing
    return total


def inject(step):
    if RANK != FAULT_RANK or step != FAULT_STEP or (FAULT_ATTEMPT and FAULT_ATTEMPT != ATTEMPT):
        return
    if FAULT == "nan":
        raise ValueError(f"loss is not finite: nan at step {step}")
    if FAULT == "exception":
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (32x20 and 16x64)")
    if FAULT == "hang":
        time.sleep(3600)
    if FAULT == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if FAULT == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if FAULT == "exit":
        os._exit(3)


def main():
    logging.basicConfig(
        format=f"%(asctime)s %(levelname)s [rank{RANK}] train: %(message)s",
        level=logging.INFO,
        stream=sys.stdout,
    )
    faulthandler.enable()
    log.info("init ring world=%d rank=%d timeout=%.0fs", WORLD, RANK, TIMEOUT)
    to_next, from_prev = connect_ring() if WORLD > 1 else (None, None)
    loss = 2.0
    for step in range(STEPS):
        time.sleep(STEP_SECONDS)
        inject(step)
        local = loss * (1.0 + 0.01 * RANK)
        total = all_reduce(local, step, to_next, from_prev) if WORLD > 1 else local
        loss = 0.9 * total / WORLD
        log.info("step %d loss %.6f", step, loss)
    log.info("training done")


if __name__ == "__main__":
    main()
