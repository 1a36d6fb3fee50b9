"""Tests for coroner_hook without torch: each case runs a small script in a fresh interpreter
(hooks are process-wide) and reads what it left in the snapshot folder. A fake ``torch`` module
checks the memory summary and state_dict paths."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAKE_TORCH = """
import sys, types
torch = types.ModuleType("torch")
cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                             memory_summary=lambda: "|  PyTorch CUDA memory summary, device ID 0  |\\n")
torch.cuda = cuda
def save(obj, path):
    with open(path, "w") as f:
        f.write(repr(sorted(obj)))
torch.save = save
sys.modules["torch"] = torch
class Model:
    def state_dict(self):
        return {"0.weight": 1, "0.bias": 2}
"""


def run(body, env_extra=None, snapshot_dir=True):
    tmp = tempfile.mkdtemp()
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CORONER_SNAPSHOT_DIR", None)
    env.pop("CORONER_RANK", None)
    env.pop("RANK", None)
    if snapshot_dir:
        env["CORONER_SNAPSHOT_DIR"] = tmp
    env["TMPDIR"] = tmp
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], env=env, capture_output=True, text=True, timeout=60)
    return proc, tmp


def read(folder, name):
    with open(os.path.join(folder, name)) as f:
        return f.read()


class HookTest(unittest.TestCase):
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
        # No torch: no memory summary, no state_dict; the empty fatal-signal file is removed.
        self.assertEqual(sorted(os.listdir(d)), ["rank3.stack.txt"])

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

    def test_sigterm_writes_then_terminates(self):
        proc, d = run("""
            import os, signal, coroner_hook
            coroner_hook.install()
            os.kill(os.getpid(), signal.SIGTERM)
            import time; time.sleep(5)
        """)
        self.assertEqual(proc.returncode, -signal.SIGTERM)
        self.assertTrue(read(d, "rank0.stack.txt").startswith("reason: received SIGTERM\n"))

    def test_without_the_agent_it_falls_back_to_a_temp_folder(self):
        proc, d = run("""
            import coroner_hook
            print(coroner_hook.install())
            raise SystemExit(0)
        """, snapshot_dir=False)
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(proc.stdout.strip(), os.path.join(d, "coroner-snapshots"))

    def test_with_torch_loaded_memory_summary_and_state_dicts_are_saved(self):
        proc, d = run(FAKE_TORCH + """
import coroner_hook
class Opt:
    def state_dict(self):
        return {"state": {}, "param_groups": []}
coroner_hook.install(model=Model(), optimizer=Opt())
raise RuntimeError("CUDA error: an illegal memory access was encountered")
""", {"CORONER_RANK": "1"})
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("memory summary, device ID 0", read(d, "rank1.memory_summary.txt"))
        self.assertEqual(read(d, "rank1.state_dict.pt"), "['0.bias', '0.weight']")
        self.assertEqual(read(d, "rank1.optimizer.state_dict.pt"), "['param_groups', 'state']")
        self.assertTrue(read(d, "rank1.stack.txt").startswith("reason: RuntimeError: CUDA error"))

    def test_a_failing_part_does_not_stop_the_others(self):
        proc, d = run(FAKE_TORCH + """
import coroner_hook
class Broken:
    def state_dict(self):
        raise RuntimeError("weights on a dead GPU")
coroner_hook.install(model=Broken())
print(sorted(os.path.basename(p) for p in coroner_hook.write_snapshot("manual")))
print(coroner_hook.write_snapshot("again"))
""".replace("import coroner_hook", "import os, coroner_hook"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("could not save a snapshot part", proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual(lines[0], "['rank0.memory_summary.txt', 'rank0.stack.txt']")
        self.assertEqual(lines[1], "[]", "only the first call writes")


if __name__ == "__main__":
    unittest.main()
