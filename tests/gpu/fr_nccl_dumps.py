"""Real NCCL flight recorder dumps of 2-rank jobs with point-to-point operations (the fixtures
tests/data/fr/nccl2_*p2p*, nccl2_batch_*, nccl2_extra_*). Rank 1 diverges at step 5.

Runs on one GPU or more: with one, both ranks share it, each with its own NCCL_HOSTID, so NCCL
takes them for two hosts and connects them over sockets on the loopback (it refuses two ranks on
one device of one host). Each rank dumps its NCCL flight recorder (`_dump_nccl_trace`, the
watchdog's pickle) right after enqueuing each operation and after waiting on it, so its last dump
holds the operation it was stuck or died in; every scenario is killed at its deadline.

usage: fr_nccl_dumps.py OUT [SCENARIO...]
"""
import datetime, os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp
import torch._C._distributed_c10d as c

BAD, STEPS, ODD = 1, 10, 5
N = 1024


def worker(rank, scenario, out, port, ngpu):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_HOSTID=f"fr-host-{rank}")
    if ngpu < 2:
        os.environ.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_IB_DISABLE="1", NCCL_NET="Socket", NCCL_SOCKET_IFNAME="lo")
    torch.cuda.set_device(rank % ngpu)
    log = open(os.path.join(out, f"rank{rank}.log"), "w", buffering=1)
    name = os.path.join(out, f"nccl_trace_rank_{rank}")

    def say(msg):
        log.write(f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S,%f')[:-3]} INFO [rank{rank}] {msg}\n")

    def dump():
        with open(name + ".tmp", "wb") as f:
            f.write(c._dump_nccl_trace())
        os.replace(name + ".tmp", name)

    def wait(works):
        dump()
        for w in works if isinstance(works, list) else [works]:
            if w is not None:
                w.wait()
        torch.cuda.synchronize()
        dump()

    dist.init_process_group("nccl", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=20), device_id=torch.device("cuda", rank % ngpu))
    peer = 1 - rank
    grad = torch.ones(N, device="cuda")
    act = torch.ones(N, device="cuda")
    try:
        for step in range(STEPS):
            odd = rank == BAD and step == ODD
            if scenario in ("p2p_size", "p2p_skip", "p2p_ok"):
                if rank == 0:
                    wait(dist.isend(act, 1))
                elif not (odd and scenario == "p2p_skip"):
                    wait(dist.irecv(torch.empty(N // 2 if odd and scenario == "p2p_size" else N, device="cuda"), 0))
            elif scenario in ("batch_size", "batch_ok"):
                n = N // 2 if odd and scenario == "batch_size" else N
                ops = [dist.P2POp(dist.isend, act, peer), dist.P2POp(dist.irecv, torch.empty(n, device="cuda"), peer)]
                wait(dist.batch_isend_irecv(ops))
            elif scenario == "extra" and odd:
                wait(dist.all_reduce(torch.ones(N // 2, device="cuda"), async_op=True))
            wait(dist.all_reduce(grad, async_op=True))
            say(f"step {step} loss {1.0 / (step + 1):.4f}")
        say("finished")
    except Exception as e:
        say(f"ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        raise


SCENARIOS = {
    "nccl2_p2p_size_r1": "p2p_size",
    "nccl2_p2p_skip_r1": "p2p_skip",
    "nccl2_p2p_ok": "p2p_ok",
    "nccl2_batch_size_r1": "batch_size",
    "nccl2_batch_ok": "batch_ok",
    "nccl2_extra_r1": "extra",
}

if __name__ == "__main__":
    os.environ.update(TORCH_FR_BUFFER_SIZE="2000", TORCH_NCCL_TRACE_BUFFER_SIZE="2000", TORCH_NCCL_ENABLE_TIMING="1", NCCL_NVLS_ENABLE="0")
    base = sys.argv[1]
    wanted = sys.argv[2:] or list(SCENARIOS)
    ngpu = torch.cuda.device_count()
    running = []
    for i, folder in enumerate(wanted):
        out = os.path.join(base, folder)
        os.makedirs(out, exist_ok=True)
        ctx = mp.start_processes(worker, args=(SCENARIOS[folder], out, 29500 + 7 * i, ngpu), nprocs=2, join=False, start_method="spawn")
        running.append((folder, out, ctx))
    deadline = time.time() + 60
    while time.time() < deadline and any(p.is_alive() for _, _, ctx in running for p in ctx.processes):
        time.sleep(0.5)
    for folder, out, ctx in running:
        alive = [r for r, p in enumerate(ctx.processes) if p.is_alive()]
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
        print(folder, "killed at the deadline:", alive, sorted(f for f in os.listdir(out) if not f.endswith(".tmp")), flush=True)
