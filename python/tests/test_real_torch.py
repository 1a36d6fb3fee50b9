"""The same guarantees with the real torch, where it is installed (skipped otherwise; the CI
machine has no torch). Distributed cases run two CPU ranks over gloo: DTensor parameters
(FSDP2's ``fully_shard`` where this torch has it) are described with their global and local
shapes, without ``state_dict()``, and the opt-in saves each rank's local shards."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from helpers import env_for, files, read, run

HAVE_TORCH = importlib.util.find_spec("torch") is not None

FORBID_STATE_DICT = """
def forbidden(*a, **k):
    open(os.path.join(os.environ["CORONER_SNAPSHOT_DIR"], "FORBIDDEN.state_dict"), "w").close()
    raise AssertionError("state_dict() called")
"""


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class RealTorchTest(unittest.TestCase):
    def test_a_plain_model_is_described_without_state_dict(self):
        proc, d = run("""
import os, torch, coroner_hook
""" + FORBID_STATE_DICT + """
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.BatchNorm1d(64), torch.nn.Linear(64, 1)).to(torch.bfloat16)
model.state_dict = forbidden
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
model(torch.randn(4, 16, dtype=torch.bfloat16)).sum().backward(); opt.step()
opt.state_dict = forbidden
coroner_hook.install(model=model, optimizer=opt)
raise ValueError("x")
""")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual([n for n in files(d) if n.endswith(".pt") or n.startswith("FORBIDDEN")], [])
        doc = json.loads(read(d, "rank0.state_dict.json"))
        got = {t["name"]: (t["kind"], t["shape"], t["dtype"], t["device"]) for t in doc["tensors"]}
        self.assertEqual(got["0.weight"], ("parameter", [64, 16], "bfloat16", "cpu"))
        self.assertEqual(got["1.running_mean"], ("buffer", [64], "bfloat16", "cpu"))
        self.assertEqual(got["1.num_batches_tracked"][1:3], ([], "int64"))
        self.assertEqual(doc["totals"]["numel"], 16 * 64 + 64 + 64 + 64 + 64 + 1)
        self.assertEqual(doc["optimizer"]["class"], "AdamW")
        self.assertEqual(doc["optimizer"]["param_groups"][0]["lr"], 3e-4)

    def test_opt_in_saves_a_loadable_state_dict(self):
        proc, d = run("""
import torch, coroner_hook
model = torch.nn.Linear(8, 4)
coroner_hook.install(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), full_state_dict=True)
raise ValueError("x")
""")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        check = subprocess.run([sys.executable, "-c", "import torch, sys; sd = torch.load(sys.argv[1]); print(sorted((k, list(v.shape)) for k, v in sd.items()))",
                                os.path.join(d, "rank0.state_dict.pt")], capture_output=True, text=True)
        self.assertEqual(check.stdout.strip(), "[('bias', [4]), ('weight', [4, 8])]", check.stderr)
        self.assertIn("rank0.optimizer.state_dict.pt", files(d))

    def test_two_sharded_ranks_describe_and_save_their_local_shards(self):
        d = tempfile.mkdtemp()
        script = """
import os, sys, torch, torch.distributed as dist
import coroner_hook
""" + FORBID_STATE_DICT + """
rank = int(sys.argv[1])
os.environ["RANK"] = str(rank)
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
from torch.distributed.device_mesh import init_device_mesh
mesh = init_device_mesh("cpu", (2,))
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
try:
    from torch.distributed.fsdp import fully_shard
    fully_shard(model, mesh=mesh)
    how = "fully_shard"
except Exception as e:
    from torch.distributed.tensor import distribute_tensor, Shard
    for m in model:
        m.weight = torch.nn.Parameter(distribute_tensor(m.weight.detach(), mesh, [Shard(0)]))
    how = "distribute_tensor (%r)" % (e,)
print(how, flush=True)
model.state_dict = forbidden
dist.barrier()
coroner_hook.install(model=model, full_state_dict=True)
raise ValueError("rank %d failed" % rank)
"""
        env = env_for(d)
        store = os.path.join(d, "store")
        procs = [subprocess.Popen([sys.executable, "-c", script, str(r), store], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in (0, 1)]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            self.assertEqual(p.returncode, 1, err)
        print("\n[real torch] sharded with %s" % outs[0][0].strip())
        self.assertEqual([n for n in files(d) if n.startswith("FORBIDDEN")], [])
        for r in (0, 1):
            doc = json.loads(read(d, "rank%d.state_dict.json" % r))
            w = {t["name"]: t for t in doc["tensors"]}["0.weight"]
            self.assertEqual((w["sharded"], w["sharding"], w["shape"], w["local_shape"], w["ranks"]),
                             (True, "DTensor", [32, 64], [16, 64], 2), w)
            self.assertEqual(doc["full_state_dict"]["written"], ["rank%d.state_dict.pt" % r], doc["full_state_dict"])
            check = subprocess.run([sys.executable, "-c", "import torch, sys; sd = torch.load(sys.argv[1]); print(list(sd['0.weight'].shape))",
                                    os.path.join(d, "rank%d.state_dict.pt" % r)], capture_output=True, text=True)
            self.assertEqual(check.stdout.strip(), "[16, 64]", check.stderr)

    def test_fsdp1_flat_parameters_over_two_ranks(self):
        d = tempfile.mkdtemp()
        script = """
import os, sys, torch, torch.distributed as dist
import coroner_hook
rank = int(sys.argv[1])
os.environ["RANK"] = str(rank)
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
try:
    model = FSDP(model, device_id=torch.device("cpu"), use_orig_params=sys.argv[3] == "1")
except Exception as e:
    print("unsupported %r" % (e,), flush=True)
    raise SystemExit(0)
coroner_hook.install(model=model)
raise ValueError("rank %d failed" % rank)
"""
        for orig in ("0", "1"):
            store = os.path.join(d, "store" + orig)
            procs = [subprocess.Popen([sys.executable, "-c", script, str(r), store, orig], env=env_for(d), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for r in (0, 1)]
            outs = [p.communicate(timeout=120) for p in procs]
            if "unsupported" in outs[0][0]:
                self.skipTest("FSDP1 on CPU: " + outs[0][0].strip())
            for p, (out, err) in zip(procs, outs):
                self.assertEqual(p.returncode, 1, err)
            doc = json.loads(read(d, "rank1.state_dict.json"))
            if orig == "0":
                (flat,) = doc["tensors"]
                self.assertEqual(flat["name"], "_flat_param")
                self.assertEqual((flat["sharding"], flat["sharded"], flat["shape"], flat["ranks"], flat["member_count"]),
                                 ("FlatParameter", True, [64 * 32 + 32 + 32 * 8 + 8], 2, 4), flat)
                self.assertEqual(flat["members"][0], {"name": "0.weight", "shape": [32, 64]})
                self.assertEqual(doc["totals"]["numel"], 64 * 32 + 32 + 32 * 8 + 8)
            else:
                views = {t["name"]: t for t in doc["tensors"]}
                self.assertEqual(sorted(views), ["0.bias", "0.weight", "1.bias", "1.weight"])
                self.assertEqual({t["sharding"] for t in views.values()}, {"FSDP flattened view"})
                self.assertEqual(doc["totals"]["unknown_global"], 4)

    def test_sigterm_with_torch_loaded_and_stuck_in_c(self):
        d = tempfile.mkdtemp()
        script = """
import ctypes, torch, coroner_hook
model = torch.nn.Linear(1024, 1024)
coroner_hook.install(model=model, optimizer=torch.optim.AdamW(model.parameters()), full_state_dict=True)
libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)
libc.pthread_mutex_lock(mutex)
print("ready", flush=True)
libc.pthread_mutex_lock(mutex)
"""
        p = subprocess.Popen([sys.executable, "-c", script], env=env_for(d), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        time.sleep(0.2)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        seconds = time.monotonic() - t0
        self.assertEqual(p.returncode, -signal.SIGTERM)
        self.assertLess(seconds, 1.0)
        self.assertEqual([n for n, s in files(d).items() if s], ["rank0.sigterm.stack.txt"])
        print("\n[real torch] SIGTERM stuck in C: died in %.3f s" % seconds)

    def test_on_a_gpu_sigterm_while_waiting_for_a_kernel_and_an_exception(self):
        """The main thread in cudaDeviceSynchronize (C, as in an NCCL wait) with a 60 s kernel
        queued: SIGTERM still kills it at once; an exception writes the memory summary too."""
        d = tempfile.mkdtemp()
        script = """
import torch, coroner_hook
if not torch.cuda.is_available():
    print("no cuda", flush=True); raise SystemExit(0)
model = torch.nn.Linear(4096, 4096).cuda()
coroner_hook.install(model=model, optimizer=torch.optim.AdamW(model.parameters()), full_state_dict=True)
torch.cuda._sleep(int(60 * 2.5e9))
print("ready", flush=True)
torch.cuda.synchronize()
"""
        p = subprocess.Popen([sys.executable, "-c", script], env=env_for(d), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline().strip()
        if line == "no cuda":
            p.wait()
            self.skipTest("no GPU")
        self.assertEqual(line, "ready", p.stderr.read() if p.poll() is not None else "")
        time.sleep(0.5)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        seconds = time.monotonic() - t0
        p.stdout.close()
        p.stderr.close()
        self.assertEqual(p.returncode, -signal.SIGTERM)
        self.assertLess(seconds, 5.0)
        written = {n: s for n, s in files(d).items() if s}
        self.assertEqual(list(written), ["rank0.sigterm.stack.txt"])
        self.assertIn("in <module>", read(d, "rank0.sigterm.stack.txt"))
        print("\n[real GPU] SIGTERM while in cudaDeviceSynchronize: died by SIGTERM in %.3f s, %d bytes written"
              % (seconds, sum(written.values())))

        proc, d = run("""
import torch, coroner_hook
model = torch.nn.Linear(4096, 4096).cuda().to(torch.bfloat16)
coroner_hook.install(model=model)
raise RuntimeError("CUDA out of memory")
""")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("PyTorch CUDA memory summary", read(d, "rank0.memory_summary.txt"))
        w = json.loads(read(d, "rank0.state_dict.json"))["tensors"][0]
        self.assertEqual((w["shape"], w["dtype"], w["device"]), ([4096, 4096], "bfloat16", "cuda:0"))


if __name__ == "__main__":
    unittest.main()
