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

Block buffers are any C-contiguous buffer-protocol objects (numpy arrays, memoryview, bytearray)
or host-memory DLPack objects (torch CPU tensors), passed without a copy: one object holding
chunks * layers blocks, or a sequence of one object per block indexed [chunk * layers + layer].
Every blocking call releases the GIL. Errors raise kvtier.Error subclasses (BusyError,
NotFoundError, CorruptionError, InvalidArgumentError, ...). See docs/integration.md.
"""

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
    StoreHandle,
    Tier,
    TierStats,
    TimedOutError,
    UnavailableError,
    derive_tenant_salt,
    generate_remote_key,
)

__version__ = _kvtier.__version__

__all__ = [
    "Engine", "Namespace", "LookupResult", "LoadHandle", "StoreHandle", "PinHandle", "Tier",
    "Priority", "EngineStats", "TierStats", "Error", "NotFoundError", "CorruptionError", "IoError",
    "InvalidArgumentError", "NotSupportedError", "NoSpaceError", "BusyError", "AbortedError",
    "TimedOutError", "UnavailableError", "empty_blocks", "derive_tenant_salt",
    "generate_remote_key", "__version__",
]


class Engine(_kvtier.Engine):
    """The cache engine. Keyword arguments map onto kvtier::EngineOptions:

    layout          "layers=..,kv_heads=..,head_dim=..,dtype=f16|bf16|f32,block_tokens=.." or a
                    dict with those keys (required)
    host_bytes      host memory tier capacity (required, > 0)
    device_bytes    device tier capacity (0: none)
    ssd_dirs        SSD tier directories (empty: no SSD tier); ssd_bytes their capacity
                    (0: 4 GiB); ssd_sync "per_batch" | "none" | "periodic"
    write_policy    "back" (SSD on eviction/flush) | "through" (SSD before store completes)
    ssd_codec       "identity" | "shuffle-zstd" | "int8" | "int4" (+ ssd_codec_level,
                    ssd_codec_group_size); ssd_key_file (mode 0600) or ssd_key_env (a
                    variable's name): keys that seal SSD records at rest (AES-256-GCM)
    model_name, weights_digest (32 bytes)   enter every key
    default_ttl_ms, worker_threads, sink_chunks, promote_on_load, numa_node
    remote_endpoints  ["host:port", ...]: the remote tier on Redis (empty: none); with
                    remote_cluster=True the endpoints are Redis Cluster seeds;
                    remote_write_policy "through" | "back"; remote_user, remote_password (AUTH);
                    remote_key_file (mode 0600) or remote_key_env (a variable's name): the
                    deployment keys that encrypt and authenticate remote values and hash their
                    key names (docs/security.md); without one, remote_insecure_plaintext=True
                    is required (values in the clear, readable and forgeable by anyone who can
                    reach the Redis)
    prediction      True: access prediction (docs/engine.md, "Access prediction"): each
                    lookup(ns, tokens, session_id=...) is an access of its session, and the
                    predicted next sessions' blocks are promoted into host memory in the
                    background; hint(ns, tokens, session_id) names the caller's next requests.
                    prediction_window, prediction_successors_max, prediction_sessions_max,
                    prediction_session_chunks_max, prediction_predict_k, prediction_blocks_max:
                    its bounds (0: the default); stats() reports prediction_accuracy,
                    prediction_promoted_blocks, prediction_useful_blocks, ...
    """

    def __init__(self, **kwargs):
        _check_engine_kwargs(kwargs)
        super().__init__(_kvtier._EngineArgs(**kwargs))

    def store(self, ns, tokens, src, *args, **kwargs):
        _check_block_dtype(self, src, "src")
        return super().store(ns, tokens, src, *args, **kwargs)

    def load(self, ns, tokens, dst):
        _check_block_dtype(self, dst, "dst")
        return super().load(ns, tokens, dst)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"<kvtier.Engine {self.layout} ({state})>"


def _engine_arg_names():
    """The keyword arguments of Engine, from the extension's own signature (one source)."""
    import re

    doc = _kvtier._EngineArgs.__init__.__doc__ or ""
    signature = doc.split("\n", 1)[0]
    return re.findall(r"[(,] \*?,? ?(\w+):", signature)


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
    for key, value in kwargs.items():
        if isinstance(value, int) and not isinstance(value, bool) and value < 0 and \
                key != "numa_node":
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


for _cls in (_kvtier.EngineStats, _kvtier.TierStats, _kvtier.LookupResult):
    _cls.__repr__ = _stats_repr


def empty_blocks(engine, chunks):
    """A zeroed numpy array for `chunks` chunks of every layer, shaped
    (chunks, layers, 2, block_tokens, kv_heads, head_dim): a ready Load destination or Store
    source (bf16 travels as uint16)."""
    import numpy as np

    return np.zeros((chunks, engine.layers) + engine.block_shape, dtype=engine.numpy_dtype)
