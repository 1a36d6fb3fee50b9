"""The crash hook on an escaping exception and a fatal signal, without torch (a fake ``torch``
from helpers stands in for it): what is written, what never is, and that the training code's
own behaviour (its exception, its exit status, its hooks) is unchanged, even when nothing can
be written."""

import json
import os
import signal
import tempfile
import unittest

from helpers import files, hook_lines, read, run

SMALL_MODEL = """
import coroner_hook
model = Module(
    [("embed.weight", Tensor((1000, 64), torch.bfloat16)),
     ("layers.0.attn.qkv.weight", DTensor((192, 64), 8, torch.bfloat16)),
     ("head.weight", Tensor((10, 64)))],
    [("norm.running_mean", Tensor((64,), dev="cpu")), ("step", Tensor((), torch.int64))])
"""


class ExceptionTest(unittest.TestCase):
    def test_uncaught_exception_writes_the_stack_with_every_thread(self):
        proc, d = run("""
            import threading, time, coroner_hook
            coroner_hook.install()
            threading.Thread(target=time.sleep, args=(30,), daemon=True, name="loader").start()
            def train():
                raise ValueError("boom at step 7")
            train()
        """, {"CORONER_RANK": "3"})
        self.assertEqual(proc.returncode, 1)
        self.assertIn("ValueError: boom at step 7", proc.stderr, "the usual traceback is still printed")
        text = read(d, "rank3.stack.txt")
        self.assertTrue(text.startswith("reason: ValueError: boom at step 7\n"), text)
        self.assertIn("Traceback (most recent call last)", text)
        self.assertIn(", in train", text)
        self.assertIn("most recent call first", text)
        self.assertGreaterEqual(text.count("hread 0x"), 2, text)
        # No model, no torch: no JSON, no memory summary; the empty faulthandler files are removed.
        self.assertEqual(list(files(d)), ["rank3.stack.txt"])
        self.assertEqual(hook_lines(proc.stderr), [])

    def test_an_exception_in_a_thread(self):
        proc, d = run("""
            import threading, coroner_hook
            coroner_hook.install()
            def work():
                raise KeyError("shard-9")
            t = threading.Thread(target=work, name="prefetch")
            t.start(); t.join()
        """, {"RANK": "5"})
        self.assertEqual(proc.returncode, 0)
        text = read(d, "rank5.stack.txt")
        self.assertTrue(text.startswith("reason: in thread prefetch: KeyError: 'shard-9'"), text)

    def test_without_the_agent_it_falls_back_to_a_temp_folder(self):
        proc, d = run("""
            import coroner_hook
            print(coroner_hook.install())
            raise SystemExit(0)
        """, snapshot_dir=False)
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(proc.stdout.strip(), os.path.join(d, "coroner-snapshots"))

    def test_the_json_describes_the_model_from_metadata_and_no_pt_is_written(self):
        proc, d = run(SMALL_MODEL + """
coroner_hook.install(model=model, optimizer=Optimizer(state_numel=10**9))
raise RuntimeError("CUDA error: an illegal memory access was encountered")
""", {"CORONER_RANK": "1"}, fake_torch=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual(list(files(d)), ["rank1.memory_summary.txt", "rank1.stack.txt", "rank1.state_dict.json"])
        self.assertIn("memory summary, device ID 0", read(d, "rank1.memory_summary.txt"))
        doc = json.loads(read(d, "rank1.state_dict.json"))
        self.assertEqual((doc["format"], doc["version"], doc["rank"]), ("coroner.state_dict_summary", 1, 1))
        self.assertTrue(doc["reason"].startswith("RuntimeError: CUDA error"))
        by_name = {t["name"]: t for t in doc["tensors"]}
        self.assertEqual(list(by_name), ["embed.weight", "layers.0.attn.qkv.weight", "head.weight", "norm.running_mean", "step"])
        embed = by_name["embed.weight"]
        self.assertEqual((embed["kind"], embed["shape"], embed["dtype"], embed["device"], embed["numel"], embed["element_size"]),
                         ("parameter", [1000, 64], "bfloat16", "cuda:0", 64000, 2))
        self.assertNotIn("sharded", embed)
        qkv = by_name["layers.0.attn.qkv.weight"]
        self.assertEqual((qkv["sharded"], qkv["sharding"], qkv["shape"], qkv["local_shape"], qkv["ranks"], qkv["placements"]),
                         (True, "DTensor", [192, 64], [24, 64], 8, ["Shard(dim=0)"]))
        self.assertEqual((by_name["norm.running_mean"]["kind"], by_name["norm.running_mean"]["device"]), ("buffer", "cpu"))
        self.assertEqual(by_name["step"]["shape"], [])
        totals = doc["totals"]
        self.assertEqual((totals["tensors"], totals["parameters"], totals["buffers"], totals["sharded"], totals["omitted"]), (5, 3, 2, 1, 0))
        self.assertEqual(totals["numel"], 64000 + 192 * 64 + 640)
        self.assertEqual(totals["local_numel"], 64000 + 24 * 64 + 640 + 64 + 1)
        self.assertEqual(totals["shard_ranks"], {"8": 1})
        # The optimizer: class and plain-number settings only; never its state (the fake's
        # state_dict() would leave a FORBIDDEN file), and a tensor lr is left out, not read.
        self.assertEqual(doc["optimizer"], {"class": "Optimizer", "param_group_count": 1, "param_groups": [
            {"params": 3, "lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}]})
        self.assertFalse(doc["full_state_dict"]["requested"])
        self.assertIn("not requested", doc["full_state_dict"]["skipped"])
        self.assertEqual(hook_lines(proc.stderr), [])

    def test_wrapper_modules_are_left_out_of_names(self):
        proc, d = run("""
import coroner_hook
coroner_hook.install(model=Module([("_fsdp_wrapped_module.layers.0._checkpoint_wrapped_module.mlp.weight", Tensor((8, 8)))]))
raise ValueError("x")
""", fake_torch=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual([t["name"] for t in json.loads(read(d, "rank0.state_dict.json"))["tensors"]], ["layers.0.mlp.weight"])

    def test_a_huge_model_is_capped_at_20000_entries_and_all_counted(self):
        proc, d = run("""
import time, coroner_hook
coroner_hook.install(model=BigModel(10**6))
t0 = time.monotonic()
coroner_hook.write_snapshot("manual")
print("seconds %.2f" % (time.monotonic() - t0))
""", {"CORONER_HOOK_WALK_SECONDS": "300"}, fake_torch=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        doc = json.loads(read(d, "rank0.state_dict.json"))
        self.assertEqual(len(doc["tensors"]), 20000)
        self.assertEqual(doc["tensors"][-1]["name"], "layers.19999.weight")
        self.assertEqual((doc["totals"]["tensors"], doc["totals"]["listed"], doc["totals"]["omitted"]), (10**6, 20000, 980000))
        self.assertEqual(doc["totals"]["bytes"], 10**6 * 25000 * 4)
        self.assertIsNone(doc["incomplete"])
        size = files(d)["rank0.state_dict.json"]
        self.assertLess(size, 4 << 20)
        print("\n[figure] JSON for 10^6 fake parameters (100 GB): %d bytes, written in %s s"
              % (size, proc.stdout.split()[-1]))

    def test_the_walk_stops_at_its_deadline_and_the_json_says_so(self):
        proc, d = run("""
import coroner_hook
coroner_hook.install(model=BigModel(10**6), full_state_dict=True)
raise ValueError("x")
""", {"CORONER_HOOK_WALK_SECONDS": "0.05"}, fake_torch=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        doc = json.loads(read(d, "rank0.state_dict.json"))
        self.assertEqual(doc["incomplete"], "the walk stopped after 0.05 s")
        self.assertLess(doc["totals"]["tensors"], 10**6)
        self.assertEqual(doc["totals"]["tensors"] % 1024, 0, "checked every 1,024 tensors")
        self.assertIn("incomplete", doc["full_state_dict"]["skipped"])


class FullStateDictTest(unittest.TestCase):
    def test_opt_in_writes_the_state_dicts_under_the_cap(self):
        proc, d = run("""
import coroner_hook
class Small(Module):
    def state_dict(self):
        return dict(self._params)
class Opt(Optimizer):
    def state_dict(self):
        return {"state": 0, "param_groups": 1}
coroner_hook.install(model=Small([("w", Tensor((4, 4)))]), optimizer=Opt(state_numel=16), full_state_dict=True)
raise ValueError("x")
""", fake_torch=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual(read(d, "rank0.state_dict.pt"), "FAKE-PT\nw [4, 4]\n")
        self.assertEqual(read(d, "rank0.optimizer.state_dict.pt"), "FAKE-PT\nparam_groups 1\nstate 0\n")
        note = json.loads(read(d, "rank0.state_dict.json"))["full_state_dict"]
        self.assertEqual(note["written"], ["rank0.state_dict.pt", "rank0.optimizer.state_dict.pt"])
        self.assertEqual((note["estimated_bytes"], note["content"]), (64, "model.state_dict()"))

    def test_opt_in_by_environment_over_the_cap_is_skipped_and_said(self):
        proc, d = run(SMALL_MODEL + """
class Big(Module):
    pass
coroner_hook.install(model=Big([("w", Tensor((1000, 1000)))]))
raise ValueError("x")
""", {"CORONER_HOOK_FULL_STATE_DICT": "1", "CORONER_HOOK_MAX_BYTES": "1000000"}, fake_torch=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual([n for n in files(d) if n.endswith(".pt") or n.startswith("FORBIDDEN")], [])
        note = json.loads(read(d, "rank0.state_dict.json"))["full_state_dict"]
        self.assertTrue(note["requested"])
        self.assertEqual(note["written"], [])
        self.assertEqual(note["skipped"], "estimated 4000000 bytes, over the cap of 1000000 (CORONER_HOOK_MAX_BYTES)")

    def test_a_sharded_model_saves_its_local_shards_without_state_dict(self):
        proc, d = run(SMALL_MODEL + """
coroner_hook.install(model=model, optimizer=Optimizer(), full_state_dict=True)
raise ValueError("x")
""", fake_torch=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertEqual(read(d, "rank0.state_dict.pt"), "FAKE-PT\nembed.weight [1000, 64]\nhead.weight [10, 64]\n"
                         "layers.0.attn.qkv.weight [24, 64]\nnorm.running_mean [64]\nstep []\n")
        self.assertNotIn("rank0.optimizer.state_dict.pt", files(d))
        note = json.loads(read(d, "rank0.state_dict.json"))["full_state_dict"]
        self.assertIn("local shards", note["content"])
        self.assertIn("sharded", note["optimizer_skipped"])

    def test_a_failed_save_is_recorded_in_the_json(self):
        proc, d = run("""
import coroner_hook
class Small(Module):
    def state_dict(self):
        raise RuntimeError("NCCL communicator was aborted")
coroner_hook.install(model=Small([("w", Tensor((4, 4)))]), full_state_dict=True)
raise ValueError("x")
""", fake_torch=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("ValueError: x", proc.stderr)
        self.assertEqual([n for n in files(d) if ".pt" in n], [])
        note = json.loads(read(d, "rank0.state_dict.json"))["full_state_dict"]
        self.assertEqual(note["written"], [])
        self.assertEqual(note["failed"], ["rank0.state_dict.pt: RuntimeError('NCCL communicator was aborted')"])
        self.assertEqual(len(hook_lines(proc.stderr)), 1, proc.stderr)

    def test_a_thread_exception_never_writes_the_full_state_dict(self):
        proc, d = run("""
import threading, coroner_hook
class Small(Module):
    def state_dict(self):
        return dict(self._params)
coroner_hook.install(model=Small([("w", Tensor((4, 4)))]), full_state_dict=True)
def work():
    raise KeyError("x")
t = threading.Thread(target=work); t.start(); t.join()
""", fake_torch=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("rank0.state_dict.pt", files(d))
        note = json.loads(read(d, "rank0.state_dict.json"))["full_state_dict"]
        self.assertEqual(note["skipped"], "written only when the main thread's exception escapes")


class NeverHurtsTheJobTest(unittest.TestCase):
    def assert_program_unchanged(self, proc):
        self.assertEqual(proc.returncode, 1)
        self.assertIn("previous excepthook ran", proc.stdout, "the program's own excepthook is still called")
        self.assertIn("ValueError: the training code's own error", proc.stderr)
        self.assertEqual(len(hook_lines(proc.stderr)), 1, proc.stderr)

    BODY = """
import sys, traceback
def mine(t, v, tb):
    print("previous excepthook ran", flush=True)
    traceback.print_exception(t, v, tb)
sys.excepthook = mine
import coroner_hook
coroner_hook.install(model=Module([("w", Tensor((4, 4)))]), optimizer=Optimizer(), full_state_dict=True)
raise ValueError("the training code's own error")
"""

    def test_an_unusable_snapshot_folder_costs_one_stderr_line(self):
        # Root ignores permission bits, so the folder is made unusable by a file in its path.
        blocker = tempfile.mkstemp()[1]
        proc, d = run(self.BODY, {"CORONER_SNAPSHOT_DIR": os.path.join(blocker, "snapshots")}, fake_torch=True)
        self.assert_program_unchanged(proc)
        self.assertIn("unusable", hook_lines(proc.stderr)[0])

    def test_a_full_disk_costs_one_stderr_line(self):
        # RLIMIT_FSIZE makes every write past 64 bytes fail (EFBIG), as a full disk would.
        proc, d = run("""
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))
""" + self.BODY, fake_torch=True)
        self.assert_program_unchanged(proc)
        self.assertIn("could not save part of the snapshot", hook_lines(proc.stderr)[0])
        self.assertEqual([n for n in files(d) if ".tmp" in n], [], "no temporary file is left behind")

    def test_a_failing_part_does_not_stop_the_others(self):
        proc, d = run("""
import os, coroner_hook
torch.cuda.memory_summary = lambda: 1 / 0
coroner_hook.install(model=Module([("w", Tensor((4, 4)))]))
print(sorted(os.path.basename(p) for p in coroner_hook.write_snapshot("manual")))
print(coroner_hook.write_snapshot("again"))
""", fake_torch=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("memory_summary: ZeroDivisionError", hook_lines(proc.stderr)[0])
        lines = proc.stdout.splitlines()
        self.assertEqual(lines[0], "['rank0.stack.txt', 'rank0.state_dict.json']")
        self.assertEqual(lines[1], "[]", "only the first call writes")

    def test_an_odd_model_costs_its_entries_not_the_snapshot(self):
        proc, d = run("""
import coroner_hook
class Odd:
    def named_parameters(self):
        yield "ok", Tensor((2,))
        yield "odd", object()
        raise RuntimeError("iteration broke")
coroner_hook.install(model=Odd())
raise ValueError("x")
""", fake_torch=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("ValueError: x", proc.stderr)
        self.assertIn("rank0.stack.txt", files(d))
        self.assertEqual(hook_lines(proc.stderr), [])
        doc = json.loads(read(d, "rank0.state_dict.json"))
        self.assertEqual([t["name"] for t in doc["tensors"]], ["ok", "odd"])
        self.assertEqual(doc["tensors"][1]["shape"], None)
        self.assertEqual(doc["incomplete"], "reading the model failed: RuntimeError('iteration broke')")


class FatalSignalTest(unittest.TestCase):
    def test_a_segfault_leaves_faulthandler_output_and_dies_by_the_signal(self):
        proc, d = run("""
            import ctypes, coroner_hook
            coroner_hook.install()
            ctypes.string_at(0)
        """, {"CORONER_RANK": "0"})
        self.assertEqual(proc.returncode, -signal.SIGSEGV)
        text = read(d, "rank0.faulthandler.txt")
        self.assertIn("Fatal Python error: Segmentation fault", text)
        self.assertIn("most recent call first", text)

    def test_a_second_process_of_the_same_rank_does_not_clobber_the_first(self):
        proc, d = run("""
            import os, subprocess, sys, coroner_hook
            coroner_hook.install()
            child = "import coroner_hook, ctypes; coroner_hook.install(); ctypes.string_at(0)"
            print(subprocess.run([sys.executable, "-c", child]).returncode)
            print(sorted(os.listdir(os.environ["CORONER_SNAPSHOT_DIR"])))
        """)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        names = files(d)
        pid_names = [n for n in names if n.startswith("rank0.p") and n.endswith(".faulthandler.txt")]
        self.assertEqual(len(pid_names), 1, names)
        self.assertIn("Segmentation fault", read(d, pid_names[0]))
        # The parent's own (empty) files were there while it ran and are gone after its exit.
        self.assertIn("rank0.faulthandler.txt", proc.stdout)
        self.assertNotIn("rank0.faulthandler.txt", names)


if __name__ == "__main__":
    unittest.main()
