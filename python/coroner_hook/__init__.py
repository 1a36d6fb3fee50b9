"""Crash hook for training scripts run under coroner-agent.

    import coroner_hook
    coroner_hook.install(model=model, optimizer=optimizer)

or, without touching the script, ``CORONER_HOOK=1`` in the environment of a Python where
``pip install ./python`` put ``coroner_hook.pth`` (then the model is known only if the script
calls ``install(model=...)``). Files go into ``$CORONER_SNAPSHOT_DIR`` (set by coroner-agent;
``<tmp>/coroner-snapshots`` otherwise), named after the rank (``CORONER_RANK``, else ``RANK``,
else 0).

**An exception escapes** (main thread or any other): ``rank<R>.stack.txt`` (a ``reason:`` line,
the traceback, every thread's stack); ``rank<R>.memory_summary.txt`` when torch is loaded and
CUDA initialised; ``rank<R>.state_dict.json``, a description of the model's parameters and
buffers (name, shape, dtype, device, numel; global and local shape of sharded ones) and the
optimizer's class and settings, read from metadata only: no tensor data, no ``state_dict()``,
no collective, at most 20,000 tensors listed.

**SIGTERM** (torchrun sends it to every worker when one fails): faulthandler, in C, writes every
thread's stack to ``rank<R>.sigterm.stack.txt``, even while the main thread is blocked in C
(an NCCL wait), then the previous disposition runs: the process dies by SIGTERM, or the
program's own handler runs. Nothing else: no torch call, nothing large.

**A fatal signal** (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL): faulthandler writes every
thread's stack to ``rank<R>.faulthandler.txt``, then the signal takes its course (core dumps
still happen).

**Opt-in**, ``install(..., full_state_dict=True)`` or ``CORONER_HOOK_FULL_STATE_DICT=1``: when
the main thread's exception escapes, ``torch.save`` of the model's ``state_dict()`` to
``rank<R>.state_dict.pt`` (and the optimizer's to ``rank<R>.optimizer.state_dict.pt``), or, for
a sharded model, of this rank's local shards without gathering; only when the estimated size is
under ``CORONER_HOOK_MAX_BYTES`` (1 GiB), else the JSON says why it was skipped.

It never imports torch and never raises into the training code: every path is wrapped, the
previous hooks and dispositions are always called, and a failure costs one line on stderr.
See docs/HOOK.md.
"""

import faulthandler
import os
import signal
import sys
import threading
import traceback

__all__ = ["install", "uninstall", "write_snapshot", "snapshot_dir", "rank"]

DEFAULT_MAX_BYTES = 1 << 30
_TRUE = ("1", "true", "yes", "on")

_lock = threading.Lock()
_state = {
    "installed": False,
    "written": False,
    "model": None,
    "optimizer": None,
    "full_state_dict": None,
    "files": [],  # (file, path, created by this pid or None): faulthandler's targets
    "prev_excepthook": None,
    "prev_threading_hook": None,
    "sigterm": False,
}
_warned = set()


def _flag(name):
    return os.environ.get(name, "").strip().lower() in _TRUE


def _int_env(name, default, kind=int):
    try:
        return kind(os.environ.get(name, "").strip() or default)
    except ValueError:
        return default


def _warn(message):
    """One line on stderr, once per distinct message; never raises."""
    line = "coroner_hook: %s\n" % message.replace("\n", " ")
    if line in _warned:
        return
    _warned.add(line)
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - stderr closed: nothing left to tell
        pass


def rank():
    """This process's global rank as a string ("0" when nothing says)."""
    for var in ("CORONER_RANK", "RANK"):
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            return value
    return "0"


def snapshot_dir():
    """Where snapshots go: $CORONER_SNAPSHOT_DIR, else <tmp>/coroner-snapshots. Created if needed."""
    path = os.environ.get("CORONER_SNAPSHOT_DIR")
    if not path:
        import tempfile

        path = os.path.join(tempfile.gettempdir(), "coroner-snapshots")
    os.makedirs(path, exist_ok=True)
    return path


def _folder():
    """The snapshot folder, or None after one stderr line saying why it cannot be used."""
    try:
        return snapshot_dir()
    except Exception as e:  # noqa: BLE001
        _warn("snapshot folder %s unusable, nothing saved: %r" % (os.environ.get("CORONER_SNAPSHOT_DIR", "<tmp>"), e))
        return None


def _path(folder, suffix):
    return os.path.join(folder, "rank%s.%s" % (rank(), suffix))


def _atomic_write(path, write):
    """Writes through a temporary name so a watcher never reads half a file."""
    tmp = "%s.tmp%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
        return path
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _claim(folder, suffix):
    """Opens a file for faulthandler: ``rank<R>.<suffix>``, created anew, or
    ``rank<R>.p<pid>.<suffix>`` when that name is taken (another process of the same rank, a
    spawned helper, or an earlier run whose file must not be truncated)."""
    for name in ("rank%s.%s" % (rank(), suffix), "rank%s.p%d.%s" % (rank(), os.getpid(), suffix)):
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        f = os.fdopen(fd, "w")
        _state["files"].append((f, path, os.getpid()))
        return f
    f = open(path, "a")
    _state["files"].append((f, path, None))
    return f


def _write_stack(folder, reason, exc_info):
    def write(tmp):
        with open(tmp, "w") as f:
            f.write("reason: %s\n" % reason.replace("\n", " "))
            if exc_info is not None and exc_info[0] is not None:
                f.write("".join(traceback.format_exception(*exc_info)))
            f.flush()
            try:
                faulthandler.dump_traceback(file=f, all_threads=True)
            except (ValueError, OSError, RuntimeError, AttributeError):
                for ident, frame in sys._current_frames().items():
                    f.write("\nThread 0x%016x (most recent call first):\n" % ident)
                    for fs in reversed(traceback.extract_stack(frame)):
                        f.write('  File "%s", line %d in %s\n' % (fs.filename, fs.lineno, fs.name))

    return [_atomic_write(_path(folder, "stack.txt"), write)]


def _torch():
    """torch if the program already loaded it; never imports it here."""
    return sys.modules.get("torch")


def _write_memory_summary(folder):
    torch = _torch()
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None or not cuda.is_initialized() or not cuda.is_available():
        return []

    def write(tmp):
        text = cuda.memory_summary()
        with open(tmp, "w") as f:
            f.write(text)

    return [_atomic_write(_path(folder, "memory_summary.txt"), write)]


def _summary_doc(reason, full):
    """The JSON document, and the full state_dict files to write now: [(suffix, writer)]."""
    from . import _summary

    doc = {"format": _summary.FORMAT, "version": _summary.VERSION, "rank": int(rank()), "pid": os.getpid(),
           "reason": reason, "model_class": None, "incomplete": None, "tensors": [], "totals": None,
           "optimizer": None, "full_state_dict": None}
    model, optimizer = _state["model"], _state["optimizer"]
    if model is not None:
        doc.update(_summary.summarize(model, _int_env("CORONER_HOOK_MAX_ENTRIES", _summary.MAX_ENTRIES),
                                      _int_env("CORONER_HOOK_WALK_SECONDS", _summary.WALK_SECONDS, float)))
    if optimizer is not None:
        try:
            doc["optimizer"] = _summary.optimizer_summary(optimizer)
        except Exception as e:  # noqa: BLE001
            doc["optimizer"] = {"class": type(optimizer).__name__, "error": repr(e)[:200]}
    plan, doc["full_state_dict"] = _full_plan(doc, full)
    return doc, plan


def _requested():
    opt = _state["full_state_dict"]
    return bool(opt) if opt is not None else _flag("CORONER_HOOK_FULL_STATE_DICT")


def _full_plan(doc, allowed):
    """Which full state_dict files to write now, and the JSON's note about it. ``allowed``: the
    main thread's exception escaped (never from a signal handler, never for a thread)."""
    from . import _summary

    cap = _int_env("CORONER_HOOK_MAX_BYTES", DEFAULT_MAX_BYTES)
    note = {"requested": _requested(), "written": [], "skipped": None, "max_bytes": cap}
    model, optimizer, torch = _state["model"], _state["optimizer"], _torch()
    totals = doc.get("totals") or {}
    if not note["requested"]:
        note["skipped"] = "not requested (install(full_state_dict=True) or CORONER_HOOK_FULL_STATE_DICT=1)"
    elif not allowed:
        note["skipped"] = "written only when the main thread's exception escapes"
    elif model is None:
        note["skipped"] = "no model given to install()"
    elif torch is None or not hasattr(torch, "save"):
        note["skipped"] = "torch is not loaded"
    elif doc.get("incomplete"):
        note["skipped"] = "the model's description is incomplete (%s)" % doc["incomplete"]
    if note["skipped"]:
        return [], note
    sharded = totals.get("sharded", 0) > 0
    size = totals.get("local_bytes" if sharded else "bytes", 0)
    note["estimated_bytes"] = size
    if size > cap:
        note["skipped"] = "estimated %d bytes%s, over the cap of %d (CORONER_HOOK_MAX_BYTES)" % (
            size, " of local shards" if sharded else "", cap)
        return [], note
    plan = []
    if sharded:
        note["content"] = "this rank's local shards ({name: local tensor}), not gathered"
        plan.append(("state_dict.pt", lambda tmp: torch.save(_summary.local_tensors(model), tmp)))
        if optimizer is not None:
            note["optimizer_skipped"] = "the model is sharded: its optimizer state is not saved"
    else:
        note["content"] = "model.state_dict()"
        plan.append(("state_dict.pt", lambda tmp: torch.save(model.state_dict(), tmp)))
        if optimizer is not None:
            opt_size = _summary.optimizer_state_bytes(optimizer)
            note["optimizer_estimated_bytes"] = opt_size
            if opt_size > cap:
                note["optimizer_skipped"] = "estimated %d bytes, over the cap of %d" % (opt_size, cap)
            else:
                plan.append(("optimizer.state_dict.pt", lambda tmp: torch.save(optimizer.state_dict(), tmp)))
    note["written"] = ["rank%s.%s" % (rank(), name) for name, _ in plan]
    return plan, note


def _write_json(folder, doc):
    import json

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(doc, f, separators=(",", ":"), allow_nan=False, default=str)
            f.write("\n")

    return _atomic_write(_path(folder, "state_dict.json"), write)


def _write_summary(folder, reason, full):
    """The JSON summary, then (opt-in, excepthook only) the full state_dicts it announces."""
    if _state["model"] is None and _state["optimizer"] is None:
        return []
    doc, plan = _summary_doc(reason, full)
    written = [_write_json(folder, doc)]
    failed = []
    for name, save in plan:
        try:
            written.append(_atomic_write(_path(folder, name), save))
        except Exception as e:  # noqa: BLE001
            failed.append("rank%s.%s: %r" % (rank(), name, e))
    if failed:
        note = doc["full_state_dict"]
        note["written"] = [n for n in note["written"] if not any(f.startswith(n + ":") for f in failed)]
        note["failed"] = failed
        _write_json(folder, doc)
        _warn("could not save the full state_dict: %s" % "; ".join(failed))
    return written


def _write(reason, exc_info=None, full=False):
    with _lock:
        if _state["written"]:
            return []
        _state["written"] = True
    folder = _folder()
    if folder is None:
        return []
    written, failed = [], []
    parts = (("stack", lambda: _write_stack(folder, reason, exc_info)),
             ("memory_summary", lambda: _write_memory_summary(folder)),
             ("state_dict summary", lambda: _write_summary(folder, reason, full)))
    for what, part in parts:
        try:
            written.extend(p for p in part() if p)
        except Exception as e:  # noqa: BLE001 - a crash hook must not crash
            failed.append("%s: %r" % (what, e))
    if failed:
        _warn("could not save part of the snapshot in %s: %s" % (folder, "; ".join(failed)))
    return written


def write_snapshot(reason, exc_info=None):
    """Writes the snapshot files now (only the first call writes); returns the paths written.

    Stack, memory summary and the JSON description of the model; never the full state_dict. Each
    part is written on its own: one that fails (a full disk, a broken CUDA context) costs one
    stderr line for all of them, and the others are still written. Never raises.
    """
    try:
        return _write(reason, exc_info)
    except Exception as e:  # noqa: BLE001
        _warn("could not save a snapshot: %r" % (e,))
        return []


def _describe(exc_type, exc_value):
    return "%s: %s" % (getattr(exc_type, "__name__", exc_type), exc_value)


def _excepthook(exc_type, exc_value, tb):
    try:
        if not issubclass(exc_type, KeyboardInterrupt):
            _write(_describe(exc_type, exc_value), (exc_type, exc_value, tb), full=True)
    except BaseException as e:  # noqa: BLE001
        _warn("could not save a snapshot: %r" % (e,))
    prev = _state["prev_excepthook"] or sys.__excepthook__
    prev(exc_type, exc_value, tb)


def _threading_hook(args):
    try:
        if args.exc_type is not SystemExit:
            name = args.thread.name if args.thread is not None else "?"
            _write("in thread %s: %s" % (name, _describe(args.exc_type, args.exc_value)),
                   (args.exc_type, args.exc_value, args.exc_traceback))
    except BaseException as e:  # noqa: BLE001
        _warn("could not save a snapshot: %r" % (e,))
    prev = _state["prev_threading_hook"] or threading.__excepthook__
    prev(args)


def install(model=None, optimizer=None, full_state_dict=None):
    """Installs the hooks; called again, replaces the model, optimizer and opt-in. Returns the
    snapshot folder (None when it cannot be used). Never raises.

    ``full_state_dict``: True to save the full state_dict when an exception escapes (see the
    module doc); None (default) follows ``CORONER_HOOK_FULL_STATE_DICT``.
    """
    _state.update(model=model, optimizer=optimizer, full_state_dict=full_state_dict)
    try:
        return _install()
    except Exception as e:  # noqa: BLE001
        _warn("not fully installed: %r" % (e,))
        return None


def _install():
    if _state["installed"]:
        return _folder()
    _state["installed"] = True
    _state["prev_excepthook"] = sys.excepthook
    sys.excepthook = _excepthook
    if hasattr(threading, "excepthook"):
        _state["prev_threading_hook"] = threading.excepthook
        threading.excepthook = _threading_hook
    import atexit

    atexit.register(_drop_empty_files)
    folder = _folder()
    if folder is None:
        return None
    # Fatal signals: faulthandler writes, then the signal proceeds with its default action.
    try:
        faulthandler.enable(file=_claim(folder, "faulthandler.txt"), all_threads=True)
    except Exception as e:  # noqa: BLE001
        _warn("fatal-signal stacks will not be saved in %s: %r" % (folder, e))
    # SIGTERM: in C, so it runs even while the main thread waits in C; chain=True then restores
    # and raises the previous disposition (default: die by SIGTERM; a Python handler: it runs).
    try:
        if hasattr(faulthandler, "register"):
            faulthandler.register(signal.SIGTERM, file=_claim(folder, "sigterm.stack.txt"), all_threads=True, chain=True)
            _state["sigterm"] = True
    except Exception as e:  # noqa: BLE001
        _warn("SIGTERM stacks will not be saved in %s: %r" % (folder, e))
    return folder


def _drop_empty_files():
    """At exit: removes the faulthandler files this process created that stayed empty."""
    for f, path, creator in _state["files"]:
        try:
            if creator != os.getpid() or f.closed:
                continue
            f.flush()
            mine, there = os.fstat(f.fileno()), os.stat(path)
            if mine.st_size == 0 and (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                os.unlink(path)
        except (OSError, ValueError):
            pass


def uninstall():
    """Restores the previous hooks (for tests and for scripts that want them back)."""
    if not _state["installed"]:
        return
    sys.excepthook = _state["prev_excepthook"] or sys.__excepthook__
    if hasattr(threading, "excepthook"):
        threading.excepthook = _state["prev_threading_hook"] or threading.__excepthook__
    if _state["sigterm"]:
        faulthandler.unregister(signal.SIGTERM)
    faulthandler.disable()
    _drop_empty_files()
    for f, _, _ in _state["files"]:
        try:
            f.close()
        except OSError:
            pass
    _state.update(installed=False, written=False, files=[], sigterm=False)
