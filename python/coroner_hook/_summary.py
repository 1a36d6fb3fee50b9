"""What a model's tensors are, read from their metadata only; what an optimizer is set to.

Everything here reads attributes: ``named_parameters()``, ``named_buffers()``, ``.shape``,
``.dtype``, ``.device``, and for sharded tensors the local piece's ``.shape`` (DTensor's
``_local_tensor``, ShardedTensor's ``local_shards()``, FSDP's FlatParameter sizes). It never calls
``state_dict()`` (FSDP's runs collectives), never copies or moves a tensor (no ``.cpu()``,
``.item()``, ``.tolist()``), never runs a collective, and never imports torch. The description
is capped (``max_entries`` tensors listed, the rest counted) and the walk stops at a deadline.
"""

import time

FORMAT = "coroner.state_dict_summary"
VERSION = 1
MAX_ENTRIES = 20000
WALK_SECONDS = 10.0
# Members of one FSDP FlatParameter listed with it (names and shapes of the original parameters).
MAX_MEMBERS = 64

# Bytes per element by dtype name, for a dtype without ``itemsize`` (torch before 2.1).
_ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex128": 16, "complex64": 8,
    "complex32": 4, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "uint16": 2,
    "uint32": 4, "uint64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "qint8": 1, "quint8": 1, "qint32": 4,
}


_dtype_names = {}


def dtype_name(dtype):
    try:
        return _dtype_names[dtype]
    except (KeyError, TypeError):
        pass
    s = str(dtype)
    s = s[6:] if s.startswith("torch.") else s
    try:
        if len(_dtype_names) < 256:
            _dtype_names[dtype] = s
    except TypeError:
        pass
    return s


def _dims(size):
    """A shape as a list of ints, or None when it is not one."""
    if size is None:
        return None
    try:
        return [int(d) for d in size]
    except (TypeError, ValueError):
        return None


def _prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def _numel(t, dims):
    if dims is not None:
        return _prod(dims)
    numel = getattr(t, "numel", None)
    return int(numel()) if callable(numel) else None


def _itemsize(t):
    size = getattr(getattr(t, "dtype", None), "itemsize", None)
    if isinstance(size, int) and size > 0:
        return size
    by_name = _ITEMSIZE.get(dtype_name(getattr(t, "dtype", "")))
    if by_name is not None:
        return by_name
    element_size = getattr(t, "element_size", None)
    return int(element_size()) if callable(element_size) else None


def _mesh_ranks(mesh):
    shape = _dims(getattr(mesh, "shape", None))
    return _prod(shape) if shape else None


def describe(name, t, kind):
    """One tensor's entry: name, kind, shape (global), dtype, device, numel, element_size; for a
    sharded tensor also sharded, sharding, local_shape, local_numel, ranks (and placements)."""
    e = {"name": name, "kind": kind}
    dims = _dims(getattr(t, "shape", None))
    if hasattr(t, "_local_tensor") and hasattr(t, "placements"):
        # DTensor (FSDP2, tensor parallel): .shape is global; the local piece is _local_tensor.
        local = getattr(t, "_local_tensor", None)
        e.update(sharded=True, sharding="DTensor")
        e["placements"] = [str(p) for p in getattr(t, "placements", ())][:8]
        e["ranks"] = _mesh_ranks(getattr(t, "device_mesh", None))
        e["local_shape"] = _dims(getattr(local, "shape", None))
    elif hasattr(t, "_unpadded_unsharded_size"):
        # FSDP1 FlatParameter: a 1-D local shard of several original parameters.
        e["local_shape"] = dims
        full = _dims(getattr(t, "_unpadded_unsharded_size", None))
        padded = _dims(getattr(t, "_padded_unsharded_size", None)) or full
        local_n = _prod(dims) if dims is not None else None
        sharded = full is not None and local_n is not None and local_n < _prod(full)
        e.update(sharded=sharded, sharding="FlatParameter")
        if sharded and local_n:
            e["ranks"] = max(1, _prod(padded) // local_n)
        fqns, shapes = list(getattr(t, "_fqns", None) or ()), list(getattr(t, "_shapes", None) or ())
        e["member_count"] = len(fqns)
        e["members"] = [{"name": str(f), "shape": _dims(s)} for f, s in zip(fqns[:MAX_MEMBERS], shapes[:MAX_MEMBERS])]
        dims = full
    elif callable(getattr(t, "local_shards", None)) and callable(getattr(t, "metadata", None)):
        # ShardedTensor: .size() is global, local_shards() the pieces this rank holds.
        dims = _dims(t.size()) if callable(getattr(t, "size", None)) else dims
        shards = list(t.local_shards())
        local_shapes = [_dims(getattr(getattr(s, "tensor", None), "shape", None)) for s in shards]
        e.update(sharded=True, sharding="ShardedTensor")
        e["ranks"] = len(getattr(t.metadata(), "shards_metadata", ()) or ()) or None
        e["local_shape"] = local_shapes[0] if len(local_shapes) == 1 else None
        e["local_numel"] = sum(_prod(s) for s in local_shapes if s is not None)
    elif getattr(t, "_fsdp_flattened", False):
        # FSDP1 with use_orig_params: a view into the local shard; the global shape is not here.
        e.update(sharded=True, sharding="FSDP flattened view", local_shape=dims)
        dims = None
    e["shape"] = dims
    e["dtype"] = dtype_name(getattr(t, "dtype", "?"))
    e["device"] = str(getattr(t, "device", "?"))
    e["numel"] = _prod(dims) if dims is not None else None
    e["element_size"] = _itemsize(t)
    if e.get("sharded") and "local_numel" not in e:
        ls = e.get("local_shape")
        e["local_numel"] = _prod(ls) if ls is not None else None
    return e


class Totals:
    def __init__(self):
        self.tensors = self.parameters = self.buffers = self.sharded = 0
        self.numel = self.buffer_numel = self.bytes = self.local_numel = self.local_bytes = 0
        self.unknown_global = 0
        self.dtypes, self.devices, self.ranks, self.placements = {}, {}, {}, {}

    def add(self, e):
        self.tensors += 1
        size = e.get("element_size") or 0
        local_n = e["local_numel"] if e.get("sharded") else e.get("numel")
        local_n = local_n or 0
        if e["kind"] == "parameter":
            self.parameters += 1
        else:
            self.buffers += 1
        n = e.get("numel")
        if n is None:
            self.unknown_global += 1
        elif e["kind"] == "parameter":
            self.numel += n
        else:
            self.buffer_numel += n
        self.bytes += (n if n is not None else local_n) * size
        self.local_numel += local_n
        self.local_bytes += local_n * size
        _bump(self.dtypes, e.get("dtype"), n if n is not None else local_n)
        _bump(self.devices, e.get("device"), 1)
        if e.get("sharded"):
            self.sharded += 1
            if e.get("ranks"):
                _bump(self.ranks, str(e["ranks"]), 1)
            for p in e.get("placements", ()):
                _bump(self.placements, p, 1)

    def as_dict(self, listed):
        return {
            "tensors": self.tensors, "listed": listed, "omitted": self.tensors - listed,
            "parameters": self.parameters, "buffers": self.buffers,
            "numel": self.numel, "buffer_numel": self.buffer_numel, "bytes": self.bytes,
            "local_numel": self.local_numel, "local_bytes": self.local_bytes,
            "sharded": self.sharded, "unknown_global": self.unknown_global,
            "dtypes": self.dtypes, "devices": self.devices, "shard_ranks": self.ranks,
            "placements": self.placements,
        }


def _bump(d, key, n):
    if key is None or len(d) >= 64 and key not in d:
        return
    d[key] = d.get(key, 0) + n


# Wrapper modules' names, left out of tensor names as FSDP's own state_dict does.
_WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def _clean(name):
    for w in _WRAPPERS:
        if w in name:
            name = name.replace(w, "")
    return name


def named_tensors(model):
    """(kind, name, tensor) for the model's parameters then buffers (each shared one once)."""
    if hasattr(model, "named_parameters"):
        for name, t in model.named_parameters():
            yield "parameter", _clean(name), t
        if hasattr(model, "named_buffers"):
            for name, t in model.named_buffers():
                yield "buffer", _clean(name), t
    elif hasattr(model, "items"):
        for name, t in model.items():
            yield "parameter", str(name), t
    else:
        raise TypeError("%s has no named_parameters()" % type(model).__name__)


def summarize(model, max_entries=MAX_ENTRIES, seconds=WALK_SECONDS):
    """The model's tensors, at most ``max_entries`` listed, all of them counted until the deadline."""
    deadline = time.monotonic() + seconds
    tensors, totals, incomplete = [], Totals(), None
    try:
        for i, (kind, name, t) in enumerate(named_tensors(model)):
            if i % 1024 == 0 and time.monotonic() > deadline:
                incomplete = "the walk stopped after %g s" % seconds
                break
            try:
                e = describe(name, t, kind)
                totals.add(e)
            except Exception as err:  # noqa: BLE001 - one odd tensor must not cost the others
                e = {"name": name, "kind": kind, "error": repr(err)[:200]}
                totals.tensors += 1
            if len(tensors) < max_entries:
                tensors.append(e)
    except Exception as err:  # noqa: BLE001 - what was read so far is kept
        incomplete = "reading the model failed: %s" % (repr(err)[:200],)
    return {
        "model_class": type(model).__name__,
        "incomplete": incomplete,
        "tensors": tensors,
        "totals": totals.as_dict(len(tensors)),
    }


def _plain(v):
    """A plain number (or a short list of them) from an optimizer setting; None otherwise."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and not hasattr(v, "shape"):
        f = float(v)
        if f != f or f in (float("inf"), float("-inf")):
            return str(f)
        return int(v) if isinstance(v, int) else f
    if isinstance(v, (list, tuple)) and 0 < len(v) <= 8:
        items = [_plain(x) for x in v]
        return items if all(x is not None for x in items) else None
    return None


def optimizer_summary(optimizer):
    """The optimizer's class and each param group's plain-number settings; never its state."""
    groups = list(getattr(optimizer, "param_groups", None) or ())
    out = {"class": type(optimizer).__name__, "param_group_count": len(groups), "param_groups": []}
    for g in groups[:16]:
        d = {}
        for k, v in (g.items() if hasattr(g, "items") else ()):
            if k == "params":
                d["params"] = len(v) if hasattr(v, "__len__") else None
                continue
            p = _plain(v)
            if p is not None:
                d[str(k)] = p
        out["param_groups"].append(d)
    return out


def optimizer_state_bytes(optimizer):
    """Estimated size of the optimizer's state (shapes times element sizes), metadata only."""
    total = 0
    for per_param in list((getattr(optimizer, "state", None) or {}).values()):
        for v in (per_param.values() if hasattr(per_param, "values") else ()):
            dims = _dims(getattr(v, "shape", None))
            size = _itemsize(v) if dims is not None else None
            if dims is not None and size:
                total += _prod(dims) * size
    return total


def local_tensors(model):
    """{name: this rank's local piece} without gathering: a DTensor's ``_local_tensor``, a
    ShardedTensor's local shards (``name#i`` when several), any other tensor as it is."""
    out = {}
    for _kind, name, t in named_tensors(model):
        if hasattr(t, "_local_tensor") and hasattr(t, "placements"):
            out[name] = t._local_tensor
        elif callable(getattr(t, "local_shards", None)) and callable(getattr(t, "metadata", None)):
            shards = list(t.local_shards())
            for i, s in enumerate(shards):
                out[name if len(shards) == 1 else "%s#%d" % (name, i)] = s.tensor
        else:
            detach = getattr(t, "detach", None)
            out[name] = detach() if callable(detach) else t
    return out
