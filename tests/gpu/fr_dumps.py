"""Makes real flight recorder dumps with gloo on CPU: 4 ranks, rank 1 diverging at step 5.
Each rank dumps its flight recorder right after enqueuing each collective (before waiting on
it), so its last dump holds the collective it was stuck in or died in."""
import os, sys, time, signal, datetime
import torch, torch.distributed as dist, torch.multiprocessing as mp
import torch._C._distributed_c10d as c

WORLD, BAD, STEPS = 4, 1, 10

def worker(rank, scenario, out, port, fmt):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    log = open(os.path.join(out, f"rank{rank}.log"), "w", buffering=1)
    name = os.path.join(out, f"nccl_trace_rank_{rank}" + (".json" if fmt == "json" else ""))
    def say(msg):
        log.write(f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S,%f')[:-3]} INFO [rank{rank}] {msg}\n")
    def dump():
        if scenario == "killed" and rank == BAD:
            return  # this rank dies before any dump reaches the disk
        data = c._dump_fr_trace_json() if fmt == "json" else c._dump_fr_trace()
        with open(name + ".tmp", "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        os.replace(name + ".tmp", name)
    def collective(fn, *args):
        work = fn(*args, async_op=True)
        dump()
        work.wait()
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=8))
    grad = torch.ones(1024)
    for step in range(STEPS):
        if rank == BAD and step == 5:
            if scenario == "extra":
                collective(dist.all_reduce, torch.ones(1024))
            elif scenario == "size":
                collective(dist.all_reduce, torch.ones(512)); say(f"step {step}"); continue
            elif scenario == "op":
                collective(dist.broadcast, grad, 0); say(f"step {step}"); continue
            elif scenario == "skip":
                say(f"step {step}"); continue
            elif scenario == "hang":
                say("loading the next shard"); time.sleep(30)
            elif scenario == "killed":
                say("about to die"); log.flush(); os.kill(os.getpid(), signal.SIGKILL)
        collective(dist.all_reduce, grad)
        say(f"step {step} loss {1.0/(step+1):.4f}")
        time.sleep(0.02)
    say("finished")
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    base = sys.argv[1]
    port = 29900
    for scenario, fmt in [("extra", "pickle"), ("size", "pickle"), ("op", "pickle"), ("skip", "pickle"), ("hang", "pickle"), ("killed", "pickle"), ("ok", "pickle"), ("size", "json")]:
        out = os.path.join(base, f"gloo4_{scenario}_r1" + ("_json" if fmt == "json" else ""))
        os.makedirs(out, exist_ok=True)
        port += 3
        ctx = mp.spawn(worker, args=(scenario, out, port, fmt), nprocs=WORLD, join=False)
        deadline = time.time() + 14
        while time.time() < deadline and any(p.is_alive() for p in ctx.processes):
            time.sleep(0.2)
        for p in ctx.processes:
            if p.is_alive(): p.kill()
        print(scenario, fmt, sorted(f for f in os.listdir(out) if not f.endswith(".tmp")), flush=True)
