"""Polls `coroner report JOB --json` every 0.25 s; prints `<unix time> <verdict> <rank> <class>` on each change."""
import json, subprocess, sys, time
coroner, job = sys.argv[1], sys.argv[2]
last = None
while True:
    out = subprocess.run([coroner, "report", job, "--json"], capture_output=True, text=True)
    if out.returncode == 0:
        r = json.loads(out.stdout)
        f = r.get("first_failure") or {}
        now = (r["verdict"], f.get("rank"), f.get("class"))
        if now != last:
            print(f"{time.time():.3f} {now[0]} {now[1]} {now[2]}", flush=True)
            last = now
    time.sleep(0.25)
