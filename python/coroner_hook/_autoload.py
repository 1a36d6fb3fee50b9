"""Installs the crash hook when a Python starts with ``CORONER_HOOK=1``, without a change to the
training script. ``coroner_hook.pth`` (put into site-packages by ``pip install ./python``) imports
this module only when the variable is set, so an unset variable costs one ``os.environ`` look-up
and imports nothing.

The model is unknown here: stacks (exception, SIGTERM, fatal signals) and the CUDA memory summary
are saved; the JSON description of the model only once the script calls
``coroner_hook.install(model=...)``. Launchers and helper processes are left alone: torchrun
itself (``torchrun``, ``-m torch.distributed.run``/``launch``), multiprocessing's spawned and
forkserver children, and torch's compile workers. Never raises: a failure prints one line on
stderr and the program carries on. Never imports torch.
"""

import os
import sys

_TRUE = ("1", "true", "yes", "on")
_SKIPPED_MODULES = ("torch.distributed.run", "torch.distributed.launch", "torch._inductor")


def skip_reason(argv):
    """Why this process is not a training process worth hooking (None when it is one)."""
    argv = list(argv or ())
    if "--multiprocessing-fork" in argv or any("multiprocessing" in a and ("spawn_main" in a or "forkserver" in a or "resource_tracker" in a) for a in argv):
        return "a multiprocessing child"
    script = os.path.basename(argv[1]) if len(argv) > 1 else ""
    if script in ("torchrun", "torchrun.exe"):
        return "the torchrun launcher"
    if "-m" in argv:
        at = argv.index("-m")
        module = argv[at + 1] if at + 1 < len(argv) else ""
        if any(module == m or module.startswith(m + ".") for m in _SKIPPED_MODULES):
            return "launcher or helper module %s" % module
    return None


def main():
    try:
        if os.environ.get("CORONER_HOOK", "").strip().lower() not in _TRUE:
            return
        if skip_reason(getattr(sys, "orig_argv", None) or [sys.executable] + list(getattr(sys, "argv", []))):
            return
        import coroner_hook

        coroner_hook.install()
    except Exception as e:  # noqa: BLE001 - interpreter start-up must go on
        try:
            sys.stderr.write("coroner_hook: autoload failed, the hook is not installed: %r\n" % (e,))
        except Exception:  # noqa: BLE001
            pass


main()
