"""SIGTERM (what torchrun sends every worker when one fails): the hook writes every thread's
stack from C (faulthandler) and then lets the previous disposition act, so the process dies by
SIGTERM at once, even while its main thread is stuck in C, and nothing heavy happens: no
state_dict, no torch call, no ``.pt``, a few KB at most."""

import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from helpers import FAKE_TORCH, env_for, files, read

# The main thread then waits in C forever, as in an NCCL wait: a default mutex locked twice by
# the same thread. A Python-level signal handler never runs there; only a C-level one does.
STUCK_IN_C = """
import ctypes
libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)
libc.pthread_mutex_lock(mutex)
print("ready", flush=True)
libc.pthread_mutex_lock(mutex)
"""


def start(body, env_extra=None):
    d = tempfile.mkdtemp()
    env = env_for(d, env_extra)
    proc = subprocess.Popen([sys.executable, "-c", FAKE_TORCH + body], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError("the child did not start: %r %s" % (line, proc.stderr.read()))
    time.sleep(0.2)
    return proc, d


def terminate(proc, limit=5.0):
    """Sends SIGTERM; returns (exit status, seconds to die). SIGKILL after ``limit`` seconds."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    out, err = proc.communicate()
    proc.stdout_text, proc.stderr_text = out, err
    return proc.returncode, time.monotonic() - t0


class SigtermTest(unittest.TestCase):
    def test_a_huge_model_stuck_in_c_dies_by_sigterm_at_once_and_writes_only_stacks(self):
        proc, d = start("""
import coroner_hook
# 10**6 parameters reporting 100 GB; state_dict() and the optimizer's leave FORBIDDEN files.
coroner_hook.install(model=BigModel(10**6), optimizer=Optimizer(state_numel=10**9), full_state_dict=True)
""" + STUCK_IN_C, {"CORONER_RANK": "4", "CORONER_HOOK_FULL_STATE_DICT": "1"})
        status, seconds = terminate(proc)
        self.assertEqual(status, -signal.SIGTERM, "died by SIGTERM, not by the launcher's SIGKILL: %s" % proc.stderr_text)
        self.assertLess(seconds, 1.0)
        written = files(d)
        # The fatal-signal file stays, empty (no exit handler runs on a death by signal; the
        # agent ships no empty file). No .pt, nothing forbidden was called.
        self.assertEqual(written.get("rank4.faulthandler.txt"), 0)
        self.assertEqual([n for n, size in written.items() if size], ["rank4.sigterm.stack.txt"])
        self.assertEqual([n for n in written if n.endswith(".pt") or n.startswith("FORBIDDEN")], [])
        self.assertLess(sum(written.values()), 300 << 10)
        text = read(d, "rank4.sigterm.stack.txt")
        self.assertIn("Current thread 0x", text)
        self.assertIn("most recent call first", text)
        self.assertIn('File "<string>"', text)
        print("\n[figure] SIGTERM with 10^6 fake parameters (100 GB), main thread stuck in C: died by "
              "SIGTERM in %.3f s, %d bytes written in %d file(s)" % (seconds, sum(written.values()), len(written)))

    def test_sigterm_in_python_code_writes_then_terminates(self):
        proc, d = start("""
import coroner_hook, time
coroner_hook.install(model=BigModel(1000))
print("ready", flush=True)
while True:
    time.sleep(0.01)
""")
        status, seconds = terminate(proc)
        self.assertEqual(status, -signal.SIGTERM)
        self.assertIn("in <module>", read(d, "rank0.sigterm.stack.txt"))
        self.assertEqual([n for n, size in files(d).items() if size], ["rank0.sigterm.stack.txt"])

    def test_the_programs_own_sigterm_handler_still_runs(self):
        proc, d = start("""
import signal, sys, time
def graceful(signum, frame):
    print("program handler ran", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, graceful)
import coroner_hook
coroner_hook.install()
print("ready", flush=True)
time.sleep(30)
""")
        status, _ = terminate(proc)
        self.assertEqual(status, 7)
        self.assertIn("program handler ran", proc.stdout_text)
        self.assertIn("most recent call first", read(d, "rank0.sigterm.stack.txt"))

    def test_an_ignored_sigterm_stays_ignored(self):
        proc, d = start("""
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
import coroner_hook
coroner_hook.install()
print("ready", flush=True)
time.sleep(0.5)
print("still alive", flush=True)
""")
        status, _ = terminate(proc)
        self.assertEqual(status, 0)
        self.assertIn("still alive", proc.stdout_text)
        self.assertIn("most recent call first", read(d, "rank0.sigterm.stack.txt"))

    def test_uninstall_gives_sigterm_back(self):
        proc, d = start("""
import coroner_hook
coroner_hook.install()
coroner_hook.uninstall()
""" + STUCK_IN_C)
        status, _ = terminate(proc)
        self.assertEqual(status, -signal.SIGTERM)
        self.assertEqual(files(d), {}, "no stack written, and the empty files were removed")


if __name__ == "__main__":
    unittest.main()
