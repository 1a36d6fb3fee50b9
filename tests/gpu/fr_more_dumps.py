"""More real flight recorder dumps with gloo on CPU (see fr_dumps.py for the 4-rank set): 2-rank
jobs (where no majority exists), coalesced all_reduce and a second process group. (gloo records no
send/recv in the flight recorder: a ring of isend/irecv left every dump's entries empty.) Rank 1 diverges at step 5 in each. Every rank dumps right after enqueuing each operation, so
its last dump holds the operation it was stuck or died in. Scenarios run in parallel."""
import os, sys, time, datetime
import torch, torch.distributed as dist, torch.multiprocessing as mp
import torch._C._distributed_c10d as c

BAD, STEPS = 1, 10

def worker(rank, world, scenario, out, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    log = open(os.path.join(out, f"rank{rank}.log"), "w", buffering=1)
    name = os.path.join(out, f"nccl_trace_rank_{rank}")
    def say(msg):
        log.write(f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S,%f')[:-3]} INFO [rank{rank}] {msg}\n")
    def dump():
        with open(name + ".tmp", "wb") as f:
            f.write(c._dump_fr_trace())
        os.replace(name + ".tmp", name)
    def run(fn, *args, **kw):
        work = fn(*args, async_op=True, **kw)
        dump()
        if work is not None:
            work.wait()
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=6))
    pair = None
    if scenario == "pg2":
        groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        pair = groups[rank // 2]
    grad = torch.ones(1024)
    bad = rank == BAD
    try:
        for step in range(STEPS):
            odd = bad and step == 5
            if scenario == "extra":
                if odd:
                    run(dist.all_reduce, torch.ones(512))
                run(dist.all_reduce, grad)
            elif scenario == "size":
                run(dist.all_reduce, torch.ones(512) if odd else grad)
            elif scenario == "hang":
                if odd:
                    say("loading the next shard"); time.sleep(30)
                run(dist.all_reduce, grad)
            elif scenario == "coalesced":
                ts = [torch.ones(256), torch.ones(128 if odd else 512)]
                run(dist.all_reduce_coalesced, ts)
            elif scenario == "pg2":
                run(dist.all_reduce, grad)
                run(dist.all_reduce, torch.ones(512) if odd else torch.ones(64), group=pair)
            say(f"step {step} loss {1.0 / (step + 1):.4f}")
            time.sleep(0.02)
        say("finished")
    except Exception as e:
        say(f"ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        raise

SCENARIOS = [("gloo2_extra_r1", 2, "extra"), ("gloo2_size_r1", 2, "size"), ("gloo2_hang_r1", 2, "hang"),
             ("gloo4_coalesced_r1", 4, "coalesced"), ("gloo4_pg2_r1", 4, "pg2")]

if __name__ == "__main__":
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    base, port, running = sys.argv[1], 29950, []
    for name, world, scenario in SCENARIOS:
        out = os.path.join(base, name); os.makedirs(out, exist_ok=True); port += 7
        running.append((name, out, mp.spawn(worker, args=(world, scenario, out, port), nprocs=world, join=False)))
    deadline = time.time() + 45
    while time.time() < deadline and any(p.is_alive() for _, _, ctx in running for p in ctx.processes):
        time.sleep(0.2)
    for name, out, ctx in running:
        for p in ctx.processes:
            if p.is_alive(): p.kill()
        for f in os.listdir(out):
            if f.endswith(".tmp"): os.remove(os.path.join(out, f))
        print(name, sorted(f for f in os.listdir(out) if not f.endswith(".tmp")), flush=True)
