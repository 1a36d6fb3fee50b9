#!/usr/bin/env python3
"""A small DDP job on NCCL for coroner's real-GPU end-to-end runs. The fault comes from FAULT
(ok, hang, oom, kill, segv, mismatch, nan, leak) on rank FAULT_RANK at step FAULT_STEP; `leak` keeps
16 GiB more on the GPU every step (one step a second) until it runs out of memory, as a job that
holds tensors across steps does.

Launch it under torchrun, or set RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT yourself."""
import ctypes
import datetime
import logging
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

RANK = int(os.environ["RANK"])
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", RANK))
WORLD = int(os.environ["WORLD_SIZE"])
FAULT = os.environ.get("FAULT", "ok")
FAULT_RANK = int(os.environ.get("FAULT_RANK", "1"))
FAULT_STEP = int(os.environ.get("FAULT_STEP", "5"))
STEPS = int(os.environ.get("STEPS", "10"))
TIMEOUT_S = int(os.environ.get("COLLECTIVE_TIMEOUT", "15"))

log = logging.getLogger("train")


def main():
    logging.basicConfig(format=f"%(asctime)s %(levelname)s [rank{RANK}] train: %(message)s",
                        level=logging.INFO, stream=sys.stdout)
    torch.cuda.set_device(LOCAL_RANK)
    dev = torch.device("cuda", LOCAL_RANK)
    log.info("init_process_group backend=nccl world=%d timeout=%ds", WORLD, TIMEOUT_S)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=TIMEOUT_S), device_id=dev)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(dev)
    try:
        import coroner_hook
        coroner_hook.install(model=model)
    except ImportError:
        pass
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[LOCAL_RANK])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    if FAULT == "nan":
        torch.autograd.set_detect_anomaly(True)
    kept = []
    for step in range(STEPS if FAULT != "leak" else 10_000):
        if FAULT == "leak" and RANK == FAULT_RANK and step >= 1:
            kept.append(torch.ones(int(16 * 2**30), dtype=torch.uint8, device=dev))
            time.sleep(1)
        elif FAULT == "leak":
            time.sleep(1)
        x = torch.randn(32, 16, device=dev)
        y = torch.randn(32, 1, device=dev)
        if RANK == FAULT_RANK and step == FAULT_STEP:
            inject(dev, x)
        loss = ((ddp(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.info("step %d loss %.6f", step, loss.item())
    dist.destroy_process_group()
    log.info("training done")


def inject(dev, x):
    if FAULT == "hang":
        time.sleep(3600)
    elif FAULT == "oom":
        torch.empty(int(200 * 2**30), dtype=torch.uint8, device=dev)
    elif FAULT == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif FAULT == "segv":
        ctypes.string_at(0)
    elif FAULT == "mismatch":
        dist.all_reduce(torch.ones(1024, device=dev))
    elif FAULT == "nan":
        x.fill_(float("nan"))


if __name__ == "__main__":
    main()
