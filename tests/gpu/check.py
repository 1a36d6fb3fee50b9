"""Checks one GPU job's report against what was injected; with --table, renders the results."""
import datetime, json, sys

EXPECTED = {  # fault -> (verdict, culprit, class)
    "ok": ("succeeded", None, None), "hang": ("failed", 1, "hang"), "oom": ("failed", 1, "cuda_oom"),
    "kill": ("failed", 1, "killed"), "segv": ("failed", 1, "segfault"),
    "mismatch": ("failed", 1, "collective_mismatch"), "nan": ("failed", 1, "nan_inf"),
    "leak": ("failed", 1, "cuda_oom"),
}

def iso(t):
    return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()

def check(mode, fault, report_path, watch_path, start, end):
    try:
        r = json.load(open(report_path))
    except Exception as e:
        return {"mode": mode, "fault": fault, "ok": False, "error": f"no report: {e}"}
    f = r.get("first_failure") or {}
    got = (r["verdict"], f.get("rank"), f.get("class"))
    want = EXPECTED[fault]
    # When the culprit first showed up in a live report, against the failure's own time.
    detected = None
    for line in open(watch_path):
        t, verdict, rank, cls = line.split()
        if (verdict, None if rank == "None" else int(rank), None if cls == "None" else cls) == want:
            detected = float(t)
            break
    first_symptom = iso(f["time"]) if f.get("time") else None
    snaps = sorted({s["kind"] for s in r.get("snapshots", [])})
    # The culprit's GPU memory as the agent sampled it (first, peak and last MiB).
    mem = next((x.get("gpu_memory") for x in r.get("ranks", []) if x["rank"] == f.get("rank")), None)
    gpu_memory = [mem["samples"], mem["first_mib"], mem["peak_mib"], mem["last_mib"]] if mem else None
    return {
        "mode": mode, "fault": fault, "expected": want, "reported": got, "ok": got == want,
        "job_seconds": round(float(end) - float(start), 1),
        "report_after_failure_s": round(detected - first_symptom, 1) if detected and first_symptom else None,
        "snapshots": snaps, "confidence": f.get("confidence"), "gpu_memory": gpu_memory,
    }

def table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    out = ["| job | expected | reported | right | failure to report (s) | job (s) | snapshots |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for x in rows:
        fmt = lambda t: "-" if not t else f"{t[0]} / rank {t[1]} / {t[2]}" if t[1] is not None or t[2] else t[0]
        out.append(f"| {x['mode']} {x['fault']} | {fmt(x.get('expected'))} | {fmt(x.get('reported'))} | {'yes' if x.get('ok') else 'NO'} | {x.get('report_after_failure_s', '-')} | {x.get('job_seconds', '-')} | {', '.join(x.get('snapshots', []))} |")
    right = sum(1 for x in rows if x.get("ok"))
    out.append(f"\n{right} of {len(rows)} jobs diagnosed right.")
    return "\n".join(out)

if __name__ == "__main__":
    if sys.argv[1] == "--table":
        print(table(sys.argv[2]))
    else:
        print(json.dumps(check(*sys.argv[1:7])))
