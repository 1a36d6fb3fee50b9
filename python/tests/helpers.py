"""Shared by the hook's tests: run a script in a fresh interpreter (hooks are process-wide) with
``python/`` importable and a fresh snapshot folder, and a fake ``torch`` to prepend to it.

The fake torch mimics only what the hook reads: tensors with ``.shape``, ``.dtype``, ``.device``,
``.numel()``, ``.element_size()``; a DTensor with ``_local_tensor``, ``placements`` and
``device_mesh``; modules with ``named_parameters()``/``named_buffers()``. Everything the hook
must never do on a tensor or model (``state_dict()``, ``.cpu()``, ``.item()``, ``.tolist()``,
a collective) leaves a ``FORBIDDEN.<what>`` file in the snapshot folder and raises, so a test
sees it even when the hook swallows the error.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAKE_TORCH = r'''
import os, sys, types

def _forbidden(what):
    folder = os.environ.get("CORONER_SNAPSHOT_DIR") or "."
    try:
        open(os.path.join(folder, "FORBIDDEN." + what), "w").close()
    except OSError:
        pass
    raise AssertionError("the hook called " + what)

torch = types.ModuleType("torch")

class dtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize
    def __str__(self):
        return "torch." + self.name

torch.float32, torch.bfloat16, torch.int64 = dtype("float32", 4), dtype("bfloat16", 2), dtype("int64", 8)

class device:
    def __init__(self, s):
        self.s = s
    def __str__(self):
        return self.s

class Tensor:
    __slots__ = ("shape", "dtype", "device")
    def __init__(self, shape, dt=None, dev="cuda:0"):
        self.shape, self.dtype, self.device = tuple(shape), dt or torch.float32, device(dev)
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n
    def element_size(self):
        return self.dtype.itemsize
    def detach(self):
        return self
    def cpu(self):
        _forbidden("cpu")
    def item(self):
        _forbidden("item")
    def tolist(self):
        _forbidden("tolist")
    def __reduce__(self):
        _forbidden("pickle-a-tensor")

class Shard:
    def __init__(self, dim):
        self.dim = dim
    def __str__(self):
        return "Shard(dim=%d)" % self.dim

class DeviceMesh:
    def __init__(self, shape):
        self.shape = tuple(shape)
    def size(self):
        _forbidden("device_mesh.size")

class DTensor(Tensor):
    __slots__ = ("_local_tensor", "placements", "device_mesh")
    def __init__(self, shape, ranks, dt=None, dev="cuda:0"):
        super().__init__(shape, dt, dev)
        local = (shape[0] // ranks,) + tuple(shape[1:])
        self._local_tensor = Tensor(local, dt, dev)
        self.placements = (Shard(0),)
        self.device_mesh = DeviceMesh((ranks,))
    def full_tensor(self):
        _forbidden("full_tensor")
    def redistribute(self, *a, **k):
        _forbidden("redistribute")

class Module:
    def __init__(self, params, buffers=()):
        self._params, self._buffers = list(params), list(buffers)
    def named_parameters(self):
        return iter(self._params)
    def named_buffers(self):
        return iter(self._buffers)
    def state_dict(self):
        _forbidden("state_dict")

class BigModel(Module):
    """n parameters of 25,000 float32 each (n = 10**6: 100 GB), made as they are asked for."""
    def __init__(self, n):
        self.n, self.t = n, Tensor((25000,))
    def named_parameters(self):
        t = self.t
        return (("layers.%d.weight" % i, t) for i in range(self.n))
    def named_buffers(self):
        return iter(())

class Optimizer:
    def __init__(self, state_numel=0):
        self.param_groups = [{"params": [1, 2, 3], "lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8,
                              "weight_decay": 0.1, "foreach": None, "lr_tensor": Tensor((1,))}]
        self.state = {0: {"exp_avg": Tensor((state_numel,)), "step": Tensor(())}} if state_numel else {}
    def state_dict(self):
        _forbidden("optimizer.state_dict")

def save(obj, path):
    """Writes the names and shapes of what was saved (a real torch.save would write the data)."""
    with open(path, "w") as f:
        f.write("FAKE-PT\n")
        for k in sorted(obj):
            v = obj[k]
            f.write("%s %s\n" % (k, list(getattr(v, "shape", ())) if hasattr(v, "shape") else repr(v)))

torch.Tensor, torch.save = Tensor, save
torch.cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                   memory_summary=lambda: "|  PyTorch CUDA memory summary, device ID 0  |\n")
torch.distributed = types.SimpleNamespace(
    all_gather=lambda *a, **k: _forbidden("all_gather"), barrier=lambda *a, **k: _forbidden("barrier"),
    all_reduce=lambda *a, **k: _forbidden("all_reduce"), broadcast=lambda *a, **k: _forbidden("broadcast"))
sys.modules["torch"] = torch
'''


def env_for(snapshot_dir, extra=None, pythonpath=True):
    env = dict(os.environ)
    for var in ("CORONER_SNAPSHOT_DIR", "CORONER_RANK", "RANK", "CORONER_HOOK", "CORONER_HOOK_FULL_STATE_DICT",
                "CORONER_HOOK_MAX_BYTES", "CORONER_HOOK_MAX_ENTRIES", "PYTHONFAULTHANDLER"):
        env.pop(var, None)
    if pythonpath:
        env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    if snapshot_dir is not None:
        env["CORONER_SNAPSHOT_DIR"] = snapshot_dir
    env.update(extra or {})
    return env


def run(body, env_extra=None, snapshot_dir=True, fake_torch=False, timeout=120):
    """Runs ``body`` (dedented; after the fake torch when asked) in a fresh interpreter.
    Returns (completed process, snapshot folder)."""
    tmp = tempfile.mkdtemp()
    env = env_for(tmp if snapshot_dir else None, env_extra)
    env["TMPDIR"] = tmp
    code = (FAKE_TORCH if fake_torch else "") + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    return proc, tmp


def read(folder, name):
    with open(os.path.join(folder, name)) as f:
        return f.read()


def files(folder):
    """{name: size} of everything in the folder."""
    if not os.path.isdir(folder):
        return {}
    return {n: os.path.getsize(os.path.join(folder, n)) for n in sorted(os.listdir(folder))}


def hook_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("coroner_hook:")]
