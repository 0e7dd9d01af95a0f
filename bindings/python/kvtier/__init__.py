"""kvtier: a tiered KV-cache engine for LLM inference (device -> host -> SSD).

    import numpy as np, kvtier
    engine = kvtier.Engine(layout="layers=32,kv_heads=8,head_dim=128,dtype=f16,block_tokens=16",
                           host_bytes=8 << 30, ssd_dirs=["/nvme/kvtier"], ssd_bytes=512 << 30)
    ns = engine.make_namespace(salt="tenant-a")
    hit = engine.lookup(ns, tokens).matched_tokens
    dst = kvtier.empty_blocks(engine, hit // engine.block_tokens)
    with engine.load(ns, tokens, dst) as load:
        for layer in range(engine.layers):
            load.wait_layer(layer)      # layer `layer` of every chunk is in dst now

kvtier.connect(path) returns the same Engine over kvtier's node service (`kvtier serve` on the
Unix socket `path`, docs/serve.md): every process of the node shares the service's tiers.

Block buffers are any C-contiguous buffer-protocol objects (numpy arrays, memoryview, bytearray)
or host-memory DLPack objects (torch CPU tensors), passed without a copy: one object holding
chunks * layers blocks, or a sequence of one object per block indexed [chunk * layers + layer].
Every blocking call releases the GIL. Errors raise kvtier.Error subclasses (BusyError,
NotFoundError, CorruptionError, InvalidArgumentError, ...). See docs/integration.md.
"""

import os

from . import _kvtier
from ._kvtier import (  # noqa: F401  (re-exported API)
    AbortedError,
    BusyError,
    CorruptionError,
    EngineStats,
    Error,
    InvalidArgumentError,
    IoError,
    LoadHandle,
    LookupResult,
    Namespace,
    NoSpaceError,
    NotFoundError,
    NotSupportedError,
    PinHandle,
    Priority,
    RemoteStats,
    StoreHandle,
    Tier,
    TierStats,
    TimedOutError,
    UnavailableError,
    _stats_fields,
    derive_tenant_salt,
    generate_remote_key,
)

__version__ = _kvtier.__version__

__all__ = [
    "Engine", "Namespace", "LookupResult", "LoadHandle", "StoreHandle", "PinHandle", "Tier",
    "Priority", "EngineStats", "TierStats", "RemoteStats", "Error", "NotFoundError",
    "CorruptionError", "IoError", "InvalidArgumentError", "NotSupportedError", "NoSpaceError",
    "BusyError", "AbortedError", "TimedOutError", "UnavailableError", "empty_blocks",
    "derive_tenant_salt",
    "generate_remote_key", "connect", "__version__",
]


class Engine(_kvtier.Engine):
    """The cache engine. Its keyword arguments are the engine's options (docs/options.md), listed
    below from the options table the library is built with; `layout` and `host_bytes` are
    required, 0 or an empty string in a numeric or text option means its default.

    """

    def __init__(self, **kwargs):
        _check_engine_kwargs(kwargs)
        super().__init__(_kvtier._EngineArgs(**kwargs))
        self._opened = True  # __repr__ reads the engine only once it exists.

    def store(self, ns, tokens, src, *args, **kwargs):
        """Starts storing src (an array of chunks x layers blocks, block_shape each, of
        numpy_dtype) under the chunks of `tokens` in namespace `ns`; returns a StoreHandle.
        Optional: priority (Priority), ttl_ms. Raises BusyError when memory is pinned or its
        dirty blocks are still being written back (a miss for the caller: try again later)."""
        _check_block_dtype(self, src, "src")
        return super().store(ns, tokens, src, *args, **kwargs)

    def load(self, ns, tokens, dst):
        """Starts loading the cached chunks of `tokens` (as many as lookup() reported) into dst,
        an array of chunks x layers blocks; returns a LoadHandle whose wait_layer(i) returns once
        layer i is in place. A block that fails verification fails the load, never serves."""
        _check_block_dtype(self, dst, "dst")
        return super().load(ns, tokens, dst)

    @classmethod
    def _connected(cls, args):
        """An Engine over the node service (kvtier.connect builds it)."""
        self = cls.__new__(cls)
        _kvtier.Engine.__init__(self, args)
        self._opened = True
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        # An Engine whose __init__ raised has no C++ engine behind it: reading one would touch
        # memory never constructed (a traceback's repr of `self` does this).
        if not self.__dict__.get("_opened", False):
            return "<kvtier.Engine (not opened)>"
        state = "closed" if self.closed else "open"
        return f"<kvtier.Engine {self.layout} ({state})>"


def connect(path, token=None, name=None, layout=None, timeout_ms=10000,
            reconnect_interval_ms=1000):
    """An Engine served by kvtier's node service listening on the Unix socket `path`
    (`kvtier serve`, docs/serve.md): the same methods (make_namespace, lookup, load, store,
    paged_cache, load_pages, save_pages, stats, ...) over the service's engine, whose tiers every
    client of the node shares; stats() are the service engine's.

    make_namespace(salt) sends `salt` as a tenant id: the service derives the namespace from it
    and the client's uid, so a tenant id names the same KV for every client of that uid, and
    clients of other uids never share it. token: the service's, when it has one. name: how the
    service names this client in its logs and metrics. layout (a str or dict, as Engine's): with
    it, connect returns before the service is up (lookups miss until it is, loads and stores raise
    UnavailableError) and a service of another layout is refused; without it the service must
    answer now and its layout is used. No call waits longer than timeout_ms for the service; while
    it is down the engine reconnects by itself every reconnect_interval_ms. Besides Engine's
    methods: connected, connection_state() and service_stats() (the service's state and stats).
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise InvalidArgumentError(f"connect: path must be a socket path, got {path!r}")
    for key, value in (("timeout_ms", timeout_ms), ("reconnect_interval_ms",
                                                    reconnect_interval_ms)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 32:
            raise InvalidArgumentError(f"connect: {key} must be a positive int, got {value!r}")
    args = _kvtier._ConnectArgs(os.fspath(path), token or "", name or "", layout, timeout_ms,
                                reconnect_interval_ms)
    return Engine._connected(args)


def _service_stats(self):
    """A connected engine: the service's state and its engine's stats (a dict, from the JSON that
    `kvtier ctl stats` prints)."""
    import json

    return json.loads(self.service_stats_json())


Engine.service_stats = _service_stats


def _engine_options():
    """The options table's rows that Python exposes (name, type, default, valid, unit, doc, note,
    aliases), from the extension: one source for the keywords, their checks and the docstring."""
    return _kvtier._engine_options()


def _engine_arg_names():
    """The keyword arguments of Engine: every row's name and its older spellings."""
    names = []
    for row in _engine_options():
        names.append(row["name"])
        names.extend(row["aliases"])
    return names


def _engine_doc():
    """Engine's docstring: its summary, then one entry per option of the table."""
    lines = [Engine.__doc__.rstrip(), ""]
    for row in _engine_options():
        facts = [row["type"], "default " + row["default"]]
        if row["valid"]:
            facts.append(row["valid"])
        if row["unit"]:
            facts.append(row["unit"])
        lines.append(f"    {row['name']} ({'; '.join(facts)})")
        # Notes about other surfaces (why the CLI lacks an option) are left to docs/options.md.
        text = row["doc"] + (". " + row["note"] if "Python" in row["note"] else "")
        if row["aliases"]:
            text += ". Also accepted: " + ", ".join(row["aliases"])
        lines.append("        " + text)
    return "\n".join(lines) + "\n"


Engine.__doc__ = _engine_doc()

_REQUIRED_ARGS = ("layout", "host_bytes")


def _check_engine_kwargs(kwargs):
    """Short, named errors instead of pybind11's whole signature: an unknown keyword (with the
    closest known one), a missing required one, a negative size or count."""
    import difflib

    names = _engine_arg_names()
    for key in kwargs:
        if names and key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"Engine() got an unexpected keyword argument {key!r}{hint}")
    for key in _REQUIRED_ARGS:
        if key not in kwargs:
            raise TypeError(f"Engine() missing required keyword argument {key!r}")
    unsigned = set()
    for row in _engine_options():
        if row["type"] in ("uint", "bytes"):
            unsigned.update([row["name"]] + row["aliases"])
    for key, value in kwargs.items():
        if isinstance(value, int) and not isinstance(value, bool) and value < 0 and \
                key in unsigned:
            raise ValueError(f"Engine(): {key} must be >= 0, got {value}")


_NUMPY_DTYPES = {"f16": ("float16", "uint16", "int16"), "bf16": ("uint16", "int16", "bfloat16"),
                 "f32": ("float32",)}


def _check_block_dtype(engine, blocks, what):
    """A numpy block buffer whose element type is not the layout's: say so by name."""
    import re

    arrays = blocks if isinstance(blocks, (list, tuple)) else [blocks]
    match = re.search(r"dtype=(\w+)", engine.layout)
    layout_dtype = match.group(1) if match else ""
    for a in arrays:
        dtype = getattr(a, "dtype", None)
        if dtype is None or not hasattr(a, "__array_interface__"):
            continue
        allowed = _NUMPY_DTYPES.get(layout_dtype, ())
        if str(dtype) not in allowed and str(dtype) != "uint8":
            raise InvalidArgumentError(
                f"{what}: a {dtype} array but the layout's dtype is {layout_dtype} (use "
                f"{allowed[0] if allowed else 'the layout dtype'}, or kvtier.empty_blocks)")


def _stats_repr(obj):
    fields = [n for n in dir(obj) if not n.startswith("_") and not callable(getattr(obj, n))]
    parts = []
    for n in fields:
        v = getattr(obj, n)
        if isinstance(v, list):
            continue
        parts.append(f"{n}={v!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"


for _cls in (_kvtier.EngineStats, _kvtier.TierStats, _kvtier.RemoteStats, _kvtier.LookupResult):
    _cls.__repr__ = _stats_repr


def empty_blocks(engine, chunks):
    """A zeroed numpy array for `chunks` chunks of every layer, shaped
    (chunks, layers, 2, block_tokens, kv_heads, head_dim): a ready Load destination or Store
    source (bf16 travels as uint16)."""
    import numpy as np

    return np.zeros((chunks, engine.layers) + engine.block_shape, dtype=engine.numpy_dtype)
