"""Inputs for the torchfrtrace comparison (docs/FLIGHT-RECORDER.md). Plain pickle, no torch needed.

usage: fr_variants.py FIXTURES SNAPSHOTS OUT

- OUT/as_nccl/<fixture>: each gloo fixture relabelled the way torchfrtrace needs (it accepts only
  `nccl:`/`xccl:` operation names, and keys `pg_config` by the group name the entries carry, where
  gloo writes ''), so its matcher can be seen on the same histories;
- OUT/nccl/...: the real NCCL dumps of a 2-GPU hang (rank 1 stuck in compute), without rank 1's
  dump, with rank 1 issuing a different size, and 4-rank copies where rank 0 diverges.
"""
import copy, os, pickle, sys

def load(p):
    with open(p, "rb") as f:
        return pickle.load(f)

def save(d, folder, rank):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"nccl_trace_rank_{rank}"), "wb") as f:
        pickle.dump(d, f)

def relabel(d):
    d = copy.deepcopy(d)
    names = {}
    for e in d["entries"]:
        e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:", 1)
        names.setdefault(e["process_group"][0], e["process_group"][1])
    cfg = list(d.get("pg_config", {}).values())
    d["pg_config"] = {}
    for i, (name, desc) in enumerate(sorted(names.items())):
        ranks = cfg[min(i, len(cfg) - 1)]["ranks"] if cfg else "[]"
        d["pg_config"][name] = {"name": name, "desc": desc, "ranks": ranks}
    return d

def main(fixtures, snaps, out):
    for fx in sorted(os.listdir(fixtures)):
        src = os.path.join(fixtures, fx)
        files = [f for f in os.listdir(src) if f.startswith("nccl_trace_rank_") and f.rsplit("_", 1)[1].isdigit()
                 and os.path.getsize(os.path.join(src, f)) > 0]
        for f in files:
            save(relabel(load(os.path.join(src, f))), os.path.join(out, "as_nccl", fx), int(f.rsplit("_", 1)[1]))
    r0, r1 = (load(os.path.join(snaps, f"hang_nccl_trace_rank_{r}")) for r in (0, 1))
    nccl = os.path.join(out, "nccl")
    save(r0, f"{nccl}/nccl2_hang_r1", 0); save(r1, f"{nccl}/nccl2_hang_r1", 1)
    save(r0, f"{nccl}/nccl2_hang_r1_no_dump_r1", 0)
    # Rank 1 issues seq 11 too, with another size from another line: an extra all_reduce.
    bad = copy.deepcopy(r1)
    extra = copy.deepcopy(r0["entries"][-1])
    extra["input_sizes"] = extra["output_sizes"] = [[1024]]
    extra["frames"] = [dict(fr, line=fr["line"] + 7) if i == 2 else fr for i, fr in enumerate(extra["frames"])]
    bad["entries"].append(extra)
    save(r0, f"{nccl}/nccl2_size_r1", 0); save(bad, f"{nccl}/nccl2_size_r1", 1)
    # Four ranks from rank 0's dump; rank 0 issues another size at seq 11.
    four = copy.deepcopy(r0)
    for cfg in four["pg_config"].values():
        cfg["ranks"] = "[0, 1, 2, 3]"
    odd = copy.deepcopy(four)
    odd["entries"][-1]["input_sizes"] = odd["entries"][-1]["output_sizes"] = [[1024]]
    for r in range(4):
        save(odd if r == 0 else four, f"{nccl}/nccl4_size_r0", r)
        if r != 3:
            save(odd if r == 0 else four, f"{nccl}/nccl4_size_r0_no_dump_r3", r)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
