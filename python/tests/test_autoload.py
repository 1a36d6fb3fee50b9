"""``CORONER_HOOK=1`` switches the hook on with no change to the training script, through the
``coroner_hook.pth`` that ``pip install ./python`` puts into site-packages. Python runs a .pth
only in a site folder, so these tests lay one out as the user site folder (``PYTHONUSERBASE``:
processed at interpreter start, exactly as site-packages is), or let pip install into it."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from helpers import PYTHON_DIR, env_for, files, hook_lines, read


def user_site(base):
    """The user site folder Python uses for PYTHONUSERBASE=base, or None where it is off (a venv)."""
    code = "import site, sys; print(site.getusersitepackages() if site.ENABLE_USER_SITE else '')"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONUSERBASE=base),
                         capture_output=True, text=True, check=True).stdout.strip()
    return out or None


def python_with_site(site_dir, base, code, env):
    """argv running ``code`` with ``site_dir`` processed as a site folder: at start-up through
    PYTHONUSERBASE, or (user site off) through site.addsitedir before the code."""
    if user_site(base) == site_dir:
        env["PYTHONUSERBASE"] = base
        return [sys.executable, "-c", code]
    return [sys.executable, "-c", "import site; site.addsitedir(%r)\n%s" % (site_dir, code)]


class AutoloadTest(unittest.TestCase):
    def setUp(self):
        self.base = tempfile.mkdtemp()
        self.site = user_site(self.base) or os.path.join(self.base, "site-packages")
        self.snapshots = tempfile.mkdtemp()

    def lay_out(self, package=True):
        """site-packages as pip leaves it: the .pth and the package."""
        os.makedirs(self.site, exist_ok=True)
        shutil.copy(os.path.join(PYTHON_DIR, "coroner_hook.pth"), self.site)
        if package:
            shutil.copytree(os.path.join(PYTHON_DIR, "coroner_hook"), os.path.join(self.site, "coroner_hook"))

    def python(self, code, extra=None):
        env = env_for(self.snapshots, extra, pythonpath=False)
        env.pop("PYTHONPATH", None)
        argv = python_with_site(self.site, self.base, code, env)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

    def test_coroner_hook_1_saves_the_stack_of_an_unchanged_script(self):
        self.lay_out()
        proc = self.python("raise ValueError('x')", {"CORONER_HOOK": "1", "RANK": "6"})
        self.assertEqual(proc.returncode, 1)
        self.assertIn("ValueError: x", proc.stderr)
        self.assertTrue(read(self.snapshots, "rank6.stack.txt").startswith("reason: ValueError: x\n"))
        self.assertEqual(hook_lines(proc.stderr), [])

    def test_unset_it_writes_nothing_and_imports_nothing(self):
        self.lay_out()
        code = "import sys; print(sorted(m for m in sys.modules if m.startswith(('coroner', 'torch'))))\nraise ValueError('x')"
        for value in (None, "", "0"):
            proc = self.python(code, {} if value is None else {"CORONER_HOOK": value})
            self.assertEqual(proc.returncode, 1)
            self.assertEqual(proc.stdout.strip(), "[]", value)
            self.assertEqual(files(self.snapshots), {}, value)
        # Set: the hook is loaded, torch still is not.
        proc = self.python(code, {"CORONER_HOOK": "1"})
        self.assertEqual(proc.stdout.strip(), "['coroner_hook', 'coroner_hook._autoload']")
        self.assertIn("rank0.stack.txt", files(self.snapshots))

    def test_a_broken_install_costs_one_line_and_the_program_runs(self):
        self.lay_out(package=False)
        proc = self.python("print('training ran')", {"CORONER_HOOK": "1"})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, "training ran\n")
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn("coroner_hook: autoload failed", proc.stderr)

    def test_the_script_can_still_name_its_model(self):
        self.lay_out()
        code = ("import sys, types\nsys.modules['torch'] = types.ModuleType('torch')\n"
                "class T:\n shape, dtype, device = (3, 4), 'torch.float32', 'cpu'\n"
                "class M:\n def named_parameters(self): return iter([('w', T())])\n def named_buffers(self): return iter([])\n"
                "import coroner_hook\ncoroner_hook.install(model=M())\nraise ValueError('x')")
        proc = self.python(code, {"CORONER_HOOK": "1"})
        self.assertEqual(proc.returncode, 1)
        self.assertIn('"name":"w","kind":"parameter","shape":[3,4]', read(self.snapshots, "rank0.state_dict.json"))

    def test_launchers_and_helpers_are_left_alone(self):
        py = sys.executable
        cases = [
            ([py, "train.py", "--lr", "3e-4"], None),
            ([py, "-m", "mypkg.train"], None),
            ([py, "-c", "raise ValueError('x')"], None),
            ([py, "/usr/bin/torchrun", "--nproc-per-node", "8", "train.py"], "the torchrun launcher"),
            ([py, "-m", "torch.distributed.run", "train.py"], "launcher or helper module torch.distributed.run"),
            ([py, "-m", "torch._inductor.compile_worker", "--workers=4"], "launcher or helper module torch._inductor.compile_worker"),
            ([py, "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
              "--multiprocessing-fork"], "a multiprocessing child"),
        ]
        code = "import json, sys\nfrom coroner_hook._autoload import skip_reason\nprint(json.dumps([skip_reason(a) for a in %r]))" % (
            [a for a, _ in cases],)
        out = subprocess.run([sys.executable, "-c", code], env=env_for(self.snapshots), capture_output=True, text=True, check=True)
        self.assertEqual(json.loads(out.stdout), [why for _, why in cases])
        # Started for real with CORONER_HOOK=1: a script named torchrun installs nothing (the
        # launcher would write rank 0's files), the same script named train.py does.
        if user_site(self.base) != self.site:
            return
        self.lay_out()
        scripts = tempfile.mkdtemp()
        for name, written in (("torchrun", {}), ("train.py", {"rank0.stack.txt"})):
            path = os.path.join(scripts, name)
            with open(path, "w") as f:
                f.write("raise ValueError('x')\n")
            env = env_for(self.snapshots, {"CORONER_HOOK": "1", "PYTHONUSERBASE": self.base}, pythonpath=False)
            env.pop("PYTHONPATH", None)
            proc = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertEqual(set(files(self.snapshots)), set(written), name)

    def test_pip_install_puts_the_pth_into_site_packages(self):
        """``pip install ./python`` (from a copy, so the tree gets no build/ folder): offline when
        setuptools can build a wheel here, else with pip's isolated build."""
        if user_site(self.base) is None:
            self.skipTest("the user site folder is off in this Python (a venv): pip install --user cannot be used")
        src = os.path.join(tempfile.mkdtemp(), "python")
        shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
        env = dict(os.environ, PYTHONUSERBASE=self.base, PIP_DISABLE_PIP_VERSION_CHECK="1")
        attempts = (["--no-build-isolation", "--no-index"], [])
        for extra in attempts:
            pip = subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--no-deps", "--quiet"] + extra + [src],
                                 env=env, capture_output=True, text=True, timeout=300)
            if pip.returncode == 0:
                break
        else:
            self.skipTest("pip could not build the package here (offline, no wheel support): %s" % pip.stderr[-300:])
        self.assertTrue(os.path.isfile(os.path.join(self.site, "coroner_hook.pth")), os.listdir(self.site))
        proc = self.python("raise ValueError('x')", {"CORONER_HOOK": "1", "CORONER_RANK": "2"})
        self.assertEqual(proc.returncode, 1)
        self.assertTrue(read(self.snapshots, "rank2.stack.txt").startswith("reason: ValueError: x\n"))


if __name__ == "__main__":
    unittest.main()
