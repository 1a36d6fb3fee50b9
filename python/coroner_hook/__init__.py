"""Crash hook for training scripts run under coroner-agent.

    import coroner_hook
    coroner_hook.install(model=model, optimizer=optimizer)

When an exception escapes (the main thread or any other) or SIGTERM arrives, it writes into
``$CORONER_SNAPSHOT_DIR`` (set by coroner-agent; a temporary folder otherwise):

- ``rank<R>.stack.txt``: a ``reason:`` line, the traceback, and every thread's stack;
- ``rank<R>.memory_summary.txt``: ``torch.cuda.memory_summary()``, when torch is loaded and CUDA
  is in use;
- ``rank<R>.state_dict.pt``: ``torch.save(model.state_dict())`` (and the optimizer's in
  ``rank<R>.optimizer.state_dict.pt``), when a model was given and torch is loaded.

On a fatal signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL) faulthandler writes every thread's
stack to ``rank<R>.faulthandler.txt`` and the signal then takes its course, so a core dump still
happens where the user asked for one. Nothing here imports torch: without it, the stack is saved.
The rank comes from ``CORONER_RANK`` or ``RANK``.
"""

import faulthandler
import os
import signal
import sys
import tempfile
import threading
import traceback

__all__ = ["install", "uninstall", "write_snapshot", "snapshot_dir", "rank"]

_lock = threading.Lock()
_state = {
    "installed": False,
    "written": False,
    "model": None,
    "optimizer": None,
    "fatal_file": None,
    "prev_excepthook": None,
    "prev_threading_hook": None,
    "prev_sigterm": None,
}


def rank():
    """This process's global rank as a string ("0" when nothing says)."""
    for var in ("CORONER_RANK", "RANK"):
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            return value
    return "0"


def snapshot_dir():
    """Where snapshots go: $CORONER_SNAPSHOT_DIR, else <tmp>/coroner-snapshots. Created if needed."""
    path = os.environ.get("CORONER_SNAPSHOT_DIR") or os.path.join(tempfile.gettempdir(), "coroner-snapshots")
    os.makedirs(path, exist_ok=True)
    return path


def _path(suffix):
    return os.path.join(snapshot_dir(), "rank%s.%s" % (rank(), suffix))


def _atomic_write(path, write):
    """Writes through a temporary name so a watcher never reads half a file."""
    tmp = "%s.tmp%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
        return path
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_stack(reason, exc_info):
    def write(tmp):
        with open(tmp, "w") as f:
            f.write("reason: %s\n" % reason.replace("\n", " "))
            if exc_info is not None and exc_info[0] is not None:
                f.write("".join(traceback.format_exception(*exc_info)))
            f.flush()
            try:
                faulthandler.dump_traceback(file=f, all_threads=True)
            except (ValueError, OSError, RuntimeError):
                for ident, frame in sys._current_frames().items():
                    f.write("\nThread 0x%016x (most recent call first):\n" % ident)
                    for fs in reversed(traceback.extract_stack(frame)):
                        f.write('  File "%s", line %d in %s\n' % (fs.filename, fs.lineno, fs.name))

    return _atomic_write(_path("stack.txt"), write)


def _torch():
    """torch if the program already loaded it; never imports it here."""
    return sys.modules.get("torch")


def _write_memory_summary():
    torch = _torch()
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None or not cuda.is_available() or not cuda.is_initialized():
        return None

    def write(tmp):
        text = cuda.memory_summary()
        with open(tmp, "w") as f:
            f.write(text)

    return _atomic_write(_path("memory_summary.txt"), write)


def _write_state_dicts():
    torch = _torch()
    written = []
    if torch is None:
        return written
    for key, suffix in (("model", "state_dict.pt"), ("optimizer", "optimizer.state_dict.pt")):
        obj = _state[key]
        if obj is None:
            continue
        written.append(_atomic_write(_path(suffix), lambda tmp, obj=obj: torch.save(obj.state_dict(), tmp)))
    return written


def write_snapshot(reason, exc_info=None):
    """Writes the snapshot files now (only the first call writes); returns the paths written.

    Each part is written on its own: one that fails (a full disk, a broken CUDA context) is
    reported on stderr and the others are still written.
    """
    with _lock:
        if _state["written"]:
            return []
        _state["written"] = True
    written = []
    for part in (lambda: [_write_stack(reason, exc_info)], lambda: [_write_memory_summary()], _write_state_dicts):
        try:
            written.extend(p for p in part() if p)
        except Exception as e:  # noqa: BLE001 - a crash hook must not crash
            sys.stderr.write("coroner_hook: could not save a snapshot part: %r\n" % (e,))
    return written


def _describe(exc_type, exc_value):
    return "%s: %s" % (getattr(exc_type, "__name__", exc_type), exc_value)


def _excepthook(exc_type, exc_value, tb):
    if not issubclass(exc_type, KeyboardInterrupt):
        write_snapshot(_describe(exc_type, exc_value), (exc_type, exc_value, tb))
    prev = _state["prev_excepthook"] or sys.__excepthook__
    prev(exc_type, exc_value, tb)


def _threading_hook(args):
    if args.exc_type is not SystemExit:
        name = args.thread.name if args.thread is not None else "?"
        write_snapshot("in thread %s: %s" % (name, _describe(args.exc_type, args.exc_value)),
                       (args.exc_type, args.exc_value, args.exc_traceback))
    prev = _state["prev_threading_hook"] or threading.__excepthook__
    prev(args)


def _sigterm(signum, frame):
    write_snapshot("received SIGTERM")
    prev = _state["prev_sigterm"]
    if callable(prev):
        prev(signum, frame)
        return
    if prev == signal.SIG_IGN:
        return
    # Die by the signal, as without the hook.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def install(model=None, optimizer=None):
    """Installs the hooks (again: replaces the model and optimizer). Returns the snapshot folder."""
    _state["model"] = model
    _state["optimizer"] = optimizer
    folder = snapshot_dir()
    if _state["installed"]:
        return folder
    _state["prev_excepthook"] = sys.excepthook
    sys.excepthook = _excepthook
    if hasattr(threading, "excepthook"):
        _state["prev_threading_hook"] = threading.excepthook
        threading.excepthook = _threading_hook
    # faulthandler writes on SIGSEGV/SIGBUS/SIGABRT/SIGFPE/SIGILL, then the signal proceeds.
    fatal = open(_path("faulthandler.txt"), "w")
    faulthandler.enable(file=fatal, all_threads=True)
    _state["fatal_file"] = fatal
    if threading.current_thread() is threading.main_thread():
        _state["prev_sigterm"] = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _sigterm)
    _state["installed"] = True
    import atexit

    atexit.register(_drop_empty_fatal_file)
    return folder


def _drop_empty_fatal_file():
    f = _state["fatal_file"]
    if f is None:
        return
    try:
        f.flush()
        if os.fstat(f.fileno()).st_size == 0:
            os.unlink(f.name)
    except OSError:
        pass


def uninstall():
    """Restores the previous hooks (for tests and for scripts that want them back)."""
    if not _state["installed"]:
        return
    sys.excepthook = _state["prev_excepthook"] or sys.__excepthook__
    if hasattr(threading, "excepthook"):
        threading.excepthook = _state["prev_threading_hook"] or threading.__excepthook__
    faulthandler.disable()
    _drop_empty_fatal_file()
    if _state["fatal_file"] is not None:
        _state["fatal_file"].close()
    if _state["prev_sigterm"] is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _state["prev_sigterm"])
    _state.update(installed=False, written=False, fatal_file=None, prev_sigterm=None)
