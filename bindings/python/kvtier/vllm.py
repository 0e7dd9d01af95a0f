"""kvtier as a vLLM KV connector: KvtierConnector (vLLM's KVConnectorBase_V1, both roles).

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvtierConnector",
        "kv_connector_module_path": "kvtier.vllm", "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"host_bytes": 4294967296,
                                      "ssd_dirs": ["/nvme/kvtier"], "ssd_bytes": 107374182400}}'

What happens where:
  scheduler process   get_num_new_matched_tokens asks the worker's kvtier engine (over a local
                      socket, see below) how many leading prompt tokens are cached: kvtier
                      chunks (one chunk = one vLLM page), up to every prompt token but the last
                      (vLLM computes that one). A prompt's partial last chunk is cached too
                      (partial_chunks), so a repeated prompt has one token to compute, not up to
                      a page.
                      update_state_after_alloc / build_connector_meta turn hits into loads and
                      finished prefills into saves; request_finished frees nothing late: a save
                      has copied its pages out during the step that computed them.
  worker process      register_kv_caches describes each layer tensor (shape, strides, dtype) to
                      kvtier, which refuses layouts it does not know. start_load_kv starts one
                      kvtier load per request straight into vLLM's pages; wait_for_layer_load(l)
                      waits for layer l only (layer 0 computes while later layers arrive);
                      save_kv_layer copies layer l's pages out; wait_for_save hands the chunks
                      to kvtier, which stores them asynchronously.
No Python touches KV bytes: gathers, scatters, loads and stores run in C++ with the GIL released.

KV cache groups: the connector declares SupportsHMA, so vLLM keeps its hybrid KV cache manager on
and gives each attention type a block table of its own. Each group is cached in a namespace of
its own: full-attention (and MLA) groups every chunk of a prompt; sliding-window groups only the
chunks of the window before the first uncomputed token, stored at a prompt's end and loaded
after a hit, each under a digest of its prefix (window_chunk_keys); a hit needs every group's
part. Layers kvtier cannot cache (state-space / linear attention: vLLM's MambaSpec, or any other
type it does not know) are refused at startup, naming the type (cache_groups).

kv_connector_extra_config (all optional):
  host_bytes            host memory tier (default 2 GiB)
  ssd_dirs, ssd_bytes   SSD tier directories (a list or one path) and capacity; with several
                        tensor-parallel ranks each rank uses <dir>/tp<rank>
  ssd_segment_bytes, write_policy ("back" | "through"), ssd_sync, worker_threads
  thread_cpus           CPUs of kvtier's threads: "all" (default: every CPU the process may use,
                        not only the cores vLLM's CPU worker binds itself to), "" (those of the
                        worker), or a list such as "0-3,8"
  writeback_age_ms_max  write-back: a stored chunk is on the SSD at most this long after its store
                        completed (default 1000; 0: write-through), docs/reliability.md
  background_nice       added to the nice value of kvtier's threads that only write chunks down
                        (SSD write-back, Redis puts), so vLLM's compute and the loads come first
                        (default 10; 0: no change), docs/engine.md "Background writes"
  background_priority   "nice" (default) | "idle": those threads also run under SCHED_IDLE, so
                        their wake-ups never preempt vLLM's forward pass (for machines whose
                        cores idle between its steps), docs/engine.md "Background writes"
  codec                 "identity" | "shuffle-zstd" | "int8" | "int4" | "int8-rot" | "int4-rot" |
                        "k8v4" | "k8v4-rot" | "ecq5" | "ecq6" | "ecq6v5" (SSD and remote records;
                        docs/codecs.md), codec_level. A lossy codec gets vLLM's "vec" CPU pages
                        as canonical blocks and is refused over pages of another ISA
                        (docs/integration.md)
  ssd_key_file, ssd_key_env          keys sealing SSD records at rest
  remote_endpoints      ["host:port", ...]: the shared Redis tier; remote_cluster,
                        remote_write_policy, remote_user, remote_password_env (a variable's
                        name; passwords never go in the config), remote_key_file / remote_key_env
                        (deployment keys, docs/security.md) or remote_insecure_plaintext,
                        remote_connections (reads' connections, default 1; puts have one more)
  fs_dir                a shared directory (NFS, Lustre, CephFS) as the remote tier instead of
                        Redis, one file per block, for vLLM instances on many nodes:
                        fs_bytes_max, fs_max_age_s, fs_sweep_interval_ms, fs_fsync,
                        fs_group_shared; the same remote_key_file / remote_key_env or
                        remote_insecure_plaintext and remote_write_policy (docs/fs_tier.md)
  salt                  the deployment's base salt (a secret separates deployments)
  tenant_secret_file, tenant_secret_env   a secret (at least 16 bytes, checked at startup): each
                        request's cache_salt then becomes the tenant salt
                        derive_tenant_salt(cache_salt, secret), so tenants who know each other's
                        cache_salt still cannot share KV without the secret. A request without
                        cache_salt is then not cached (counted in unsalted_requests), unless
  default_tenant        names the tenant id such requests share
  model_name            enters every key (default: vLLM's model and dtype)
  stats_file            JSON counters written by the worker after each step that changed them,
                        and within 50 ms of a store's completion when no step follows it (with
                        several tensor-parallel ranks each rank writes <stats_file>.tp<rank>)
  warm_staging_bytes    staging faulted in at startup (default: one max_model_len load, <= 1 GiB)
  runtime_dir           where the lookup socket lives (default: $TMPDIR/kvtier-<uid>, mode 0700)
  partial_chunks        true (default): a prompt's partial last chunk is stored as well, as a
                        chunk of its own whose key's tokens are padded with 0xFFFFFFFF (an id no
                        vocabulary has) and whose rows after its tokens are zeros; a hit loads
                        every prompt token but the last, from the prompt's last chunk too.
                        false: whole chunks only, never the one holding the last prompt token.
  kv_events             KV events for routers: "auto" (default) reports the chunks kvtier holds
                        through vLLM's KV cache events when vLLM publishes its own
                        (kv_events_config.enable_kv_cache_events); true / false: always / never.
                        BlockStored when a save's whole chunks are in kvtier (its store
                        completed), BlockRemoved when kvtier no longer holds one, under vLLM's own
                        block hashes, with the tier as medium: "kvtier:host", "kvtier:cxl",
                        "kvtier:ssd", "kvtier:remote"; a chunk that moves tier is removed from its
                        old medium and stored in its new one. Removals are found by looking the
                        announced prompts up again from the worker's reaper thread:
  kv_events_interval_ms at most this often (default 1000),
  kv_events_prompts_per_tick  this many prompts each time, checked longest ago first (128),
  kv_events_max_prompts prompts tracked (default 4096; past it the oldest is dropped without an
                        event, counted in kv_events_untracked). The events go out with the next
                        step's output; with several tensor-parallel ranks, once every rank has
                        reported them. docs/integration.md, "KV events for routers".

On kvtier's node service (`kvtier serve`, docs/serve.md), which owns the node's tiers and is
shared by every vLLM of the node and kept across their restarts:
  server                "unix:/run/kvtier/kvtier.sock": no kvtier engine and no lookup socket in
                        vLLM. The scheduler asks the service itself (its own connection,
                        kvtier.connect); the worker loads and saves through its connection
                        (given the layout, so it starts before the service is up). The tier
                        options above are the service's then, and ignored here.
  server_token_file, server_token_env   the service's token, when it has one
  server_timeout_ms     the longest any call waits for the service (default 5000)
  server_reconnect_interval_ms          between connection attempts while it is down (1000)
  Tenants: a request's cache_salt (or default_tenant) is sent as its tenant id, from which the
  service derives the namespace with its own tenant secret (tenant_secret_* is refused here).
  A service that is down or dies costs hits, never answers: lookups are misses, loads fail
  their pages (vLLM recomputes them, kv_load_failure_policy "recompute"), saves are skipped
  (service_errors counts both); the connections come back by themselves.

Stopping: the worker flushes kvtier's dirty chunks to the SSD as soon as it gets SIGTERM or
SIGINT (systemctl stop, Ctrl-C), before vLLM's own handler runs, and logs how many chunks it
wrote and how long it took. vLLM force-kills its workers --shutdown-timeout seconds after the
signal (default 0: at once, racing with the flush). A SIGKILL (OOM killer, vLLM's force-kill)
loses at most the chunks stored within writeback_age_ms_max before it.

Each request's cache_salt and LoRA adapter enter its kvtier namespace: two tenants (or two
adapters) never share KV. The scheduler-side hooks never raise into vLLM's engine core: an
unexpected error is a miss (or no store), logged and counted in scheduler_errors.

Per request, kv_transfer_params {"kvtier": {"load": bool, "save": bool, "priority":
"normal"|"high"|"pinned", "ttl_ms": int}} skips the lookup, skips the store, or sets the
priority and TTL of the chunks the request stores ("pinned": a shared system prompt, evicted
last). Controls that do not parse leave the request neither loaded nor stored (counted in
bad_transfer_params). docs/integration.md, "vLLM: KvtierConnector".
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import os
import re
import signal
import socket
import stat
import struct
import tempfile
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener, answer_challenge, deliver_challenge
from typing import Any

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

try:  # vLLM's hybrid KV cache manager (one block table per KV cache group) talks to it.
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
except ImportError:  # An older vLLM: one group only, the plain request_finished.
    class SupportsHMA:  # noqa: D101 - a stand-in with nothing to declare
        pass
try:  # KV cache events of connectors (KV-aware routers); absent from older vLLMs.
    from vllm.distributed.kv_events import KVConnectorKVEvents
except ImportError:
    KVConnectorKVEvents = object
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
from vllm.logger import init_logger

import kvtier
from kvtier.files import read_secret_file, replace_regular_file

# Under vLLM's "vllm" logger, whose handlers vLLM configures in every process: a logger outside
# it would drop INFO lines (the flush on SIGTERM/SIGINT says what it wrote there).
logger = init_logger(f"vllm.{__name__}")

_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_LOOKUP_CONNECT_SECONDS = 60.0
_SERVER_TIMEOUT_MS = 5000
_SERVER_RECONNECT_MS = 1000
# Options of the connector's own engine, which the node service's configuration replaces.
_ENGINE_KEYS = ("host_bytes", "ssd_dirs", "ssd_bytes", "ssd_segment_bytes", "write_policy",
                "ssd_sync", "worker_threads", "thread_cpus", "background_nice",
                "background_priority",
                "writeback_age_ms_max", "codec",
                "codec_level", "ssd_key_file", "ssd_key_env", "remote_endpoints", "fs_dir",
                "runtime_dir")


# ---------------------------------------------------------------------------------------------
# What the scheduler tells the workers for one step (pickled across processes: plain data).

@dataclasses.dataclass
class LoadOp:
    req_id: str
    ns: tuple            # (salt, extra_keys) of the request's kvtier namespace
    tokens: list         # The chunks' tokens: chunks * block_tokens of them
    pages: list          # The request's pages of those chunks, chunk order
    first_chunk: int     # Chunks below are vLLM's own (its prefix cache): not written
    chunks: int
    failed: bool = False  # The scheduler lost this load: its pages are reported as failed
    # The tokens vLLM takes as loaded: the last chunk may be written whole but taken in part
    # (the prompt's last token, and the zero rows after a partial tail, are computed over).
    hit_tokens: int = 0
    group: int = 0       # The KV cache group whose pages these are
    at: int = -1         # A sliding-window chunk's index in the prompt (one chunk); -1: a prefix


@dataclasses.dataclass
class SaveOp:
    req_id: str
    ns: tuple
    tokens: list
    pages: list
    chunks: int
    first_chunk: int = 0  # Chunks below are cached already (loaded, or vLLM's own): not copied
    priority: str = "normal"  # The request's "kvtier" controls (_request_controls)
    ttl_ms: int = 0
    tail_tokens: int = 0  # > 0: the last chunk is the prompt's partial tail of that many tokens
    group: int = 0
    at: int = -1
    # With KV events on: what the worker needs to report the whole chunks [first, first +
    # len(hashes)) once kvtier holds them (_block_event_info).
    events: dict | None = None


@dataclasses.dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list = dataclasses.field(default_factory=list)
    saves: list = dataclasses.field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Per-request control: a request's kv_transfer_params may hold {"kvtier": {...}} (vLLM's
# SamplingParams(extra_args={"kv_transfer_params": ...}), or "kv_transfer_params" in an OpenAI API
# request's body). docs/integration.md, "Per-request control".

_PRIORITY_OF = {"normal": kvtier.Priority.NORMAL, "high": kvtier.Priority.HIGH,
                "pinned": kvtier.Priority.PINNED_PROMPT}
_CONTROL_DEFAULTS = {"load": True, "save": True, "priority": "normal", "ttl_ms": 0}
_PRIORITIES = ("normal", "high", "pinned")
_CONTROL_TTL_MS_MAX = 365 * 24 * 3600 * 1000  # A year.
# What a request whose controls do not parse gets: neither loaded nor stored (it may have asked
# not to be stored; a typo must not store it).
_CONTROL_REFUSED = {"load": False, "save": False, "priority": "normal", "ttl_ms": 0}

# A prompt's partial last chunk is cached as a chunk of its own: its tokens padded to a whole
# chunk with this id, which no vocabulary has (vLLM refuses prompt tokens outside the model's
# vocabulary), so a padded chunk's key is never a whole chunk's. docs/key_format.md.
TAIL_PAD_TOKEN = 0xFFFFFFFF


def chunk_tokens(prompt, chunks: int, block_tokens: int) -> list:
    """The tokens of a prompt's first `chunks` chunks, the last one padded with TAIL_PAD_TOKEN
    when the prompt ends inside it."""
    n = chunks * block_tokens
    if n <= len(prompt):
        return list(prompt[:n])
    return list(prompt) + [TAIL_PAD_TOKEN] * (n - len(prompt))


# ---------------------------------------------------------------------------------------------
# KV cache groups: vLLM's hybrid KV cache manager gives each attention type its own block table
# (a group), and a block id belongs to one group at a time. Each group is cached in a namespace
# of its own (a group's chunks never alias another's). docs/integration.md, "Model families".

@dataclasses.dataclass(frozen=True)
class CacheGroup:
    index: int
    kind: str              # "full" (K/V pages), "latent" (MLA) or "sliding"
    window: int = 0        # sliding: the window in tokens (a token sees the window - 1 before it)
    layers: tuple = ()     # vLLM's layer names, () when vLLM did not say

    def key(self) -> str:
        """The extra key of the group's namespace (only when a model has several groups)."""
        return f"kv_group:{self.index}:{self.kind}" + (f":{self.window}" if self.window else "")

    def describe(self) -> str:
        what = {"full": "full attention", "latent": "MLA latent",
                "sliding": f"sliding window of {self.window} tokens"}[self.kind]
        return f"group {self.index}: {what}, {len(self.layers)} layers"


# vLLM's spec classes kvtier knows, by their exact name: a subclass (sinks, MLA windows, ...)
# changes what a page holds, so it is refused until kvtier knows it too.
_GROUP_KINDS = {"FullAttentionSpec": "full", "MLAAttentionSpec": "latent",
                "SlidingWindowSpec": "sliding"}


def cache_groups(kv_cache_config, block_tokens: int) -> list:
    """The KV cache groups of vLLM's kv_cache_config as CacheGroups, or RuntimeError naming the
    first layer type kvtier cannot cache (state-space and linear-attention layers keep a
    recurrent state, not pages of per-token KV). Without a config (an older vLLM): one full
    attention group."""
    groups = list(getattr(kv_cache_config, "kv_cache_groups", None) or [])
    if not groups:
        return [CacheGroup(0, "full")]
    out = []
    for i, group in enumerate(groups):
        spec = group.kv_cache_spec
        name = type(spec).__name__
        layers = tuple(getattr(group, "layer_names", ()) or ())
        kind = _GROUP_KINDS.get(name)
        if kind is None:
            # vLLM gives every recurrent-state layer (Mamba, linear attention, short
            # convolutions, gated delta nets) a MambaSpec.
            state = any(c.__name__ == "MambaSpec" for c in type(spec).__mro__)
            what = ("state-space or linear-attention layers, whose recurrent state kvtier does "
                    "not save" if state else "a layer type kvtier does not cache")
            raise RuntimeError(
                f"KvtierConnector: KV cache group {i} has layers of type {name} "
                f"({', '.join(layers[:4])}{', ...' if len(layers) > 4 else ''}): {what}. "
                "Supported: full attention, MLA and sliding-window attention "
                "(docs/integration.md, \"Model families\")")
        spec_tokens = getattr(spec, "block_size", block_tokens)
        if spec_tokens != block_tokens:
            raise RuntimeError(f"KvtierConnector: KV cache group {i} ({name}) has pages of "
                               f"{spec_tokens} tokens, not the cache's {block_tokens}")
        window = int(spec.sliding_window) if kind == "sliding" else 0
        out.append(CacheGroup(i, kind, window, layers))
    return out


def window_start_chunk(group: CacheGroup, hit: int, block_tokens: int) -> int:
    """The first chunk a sliding-window group needs when `hit` tokens are computed: the one
    holding the oldest token the next token sees (vLLM's pages before it are freed, or null)."""
    return max(0, hit - group.window + 1) // block_tokens


def window_chunk_keys(prompt, first: int, end: int, block_tokens: int) -> dict:
    """{chunk: key tokens} for chunks [first, end) of a sliding-window group. Such a group keeps
    only a window's chunks, so its chunks are cached one by one, each under a chunk of its own
    whose tokens are a digest of every prompt token up to its end (chunk_tokens: the prompt's
    partial last chunk padded): a chunk is found without the chunks before it, and its key still
    covers the whole prefix its KV depends on."""
    digest = hashlib.blake2b(digest_size=64)
    tokens = chunk_tokens(prompt, end, block_tokens)
    keys = {}
    for chunk in range(end):
        part = tokens[chunk * block_tokens:(chunk + 1) * block_tokens]
        digest.update(struct.pack(f"<{len(part)}I", *part))
        if chunk >= first:
            words = list(struct.unpack("<16I", digest.copy().digest()))
            keys[chunk] = (words * -(-block_tokens // 16))[:block_tokens]
    return keys


def _request_controls(params) -> tuple[dict, str | None]:
    """The "kvtier" controls of a request's kv_transfer_params: (controls, None), or
    (_CONTROL_REFUSED, why) when they do not parse. Never raises."""
    if params is None:
        return dict(_CONTROL_DEFAULTS), None
    if not isinstance(params, dict):
        return dict(_CONTROL_REFUSED), "kv_transfer_params is not an object"
    mine = params.get("kvtier")
    if mine is None:
        return dict(_CONTROL_DEFAULTS), None
    if not isinstance(mine, dict):
        return dict(_CONTROL_REFUSED), 'kv_transfer_params "kvtier" is not an object'
    controls = dict(_CONTROL_DEFAULTS)
    for key, value in mine.items():
        if key not in controls:
            return dict(_CONTROL_REFUSED), (f'unknown key {str(key)[:64]!r} in kv_transfer_params '
                                            f'"kvtier" (valid: {", ".join(controls)})')
        if key in ("load", "save") and not isinstance(value, bool):
            return dict(_CONTROL_REFUSED), f'kv_transfer_params "kvtier" "{key}": true or false'
        if key == "priority" and value not in _PRIORITIES:
            return dict(_CONTROL_REFUSED), ('kv_transfer_params "kvtier" "priority": one of '
                                            + ", ".join(_PRIORITIES))
        if key == "ttl_ms" and (isinstance(value, bool) or not isinstance(value, int)
                                or not 0 <= value <= _CONTROL_TTL_MS_MAX):
            return dict(_CONTROL_REFUSED), ('kv_transfer_params "kvtier" "ttl_ms": a whole number '
                                            f'of milliseconds in [0, {_CONTROL_TTL_MS_MAX}]')
        controls[key] = value
    return controls, None


# ---------------------------------------------------------------------------------------------
# The engine's counters in the connector's stats (stats_file): every row of the engine's stats
# table (kvtier._stats_fields(), docs/stats.md) under its own name, so they follow the table.

_STATS_TIER_SCOPES = ("tier", "age-limited tier")
_STATS_ENGINE_SCOPES = ("engine", "remote")


@functools.cache
def _stats_row_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The per-tier and the engine rows' names: the table is fixed, so read it once."""
    rows = kvtier._stats_fields()
    return (tuple(r["name"] for r in rows if r["scope"] in _STATS_TIER_SCOPES),
            tuple(r["name"] for r in rows if r["scope"] in _STATS_ENGINE_SCOPES))


def engine_stats_dict(es) -> dict:
    """"tiers": per tier kind its per-tier rows; "engine": the engine rows; and "remote_store":
    the remote store's rows, with a remote tier only."""
    tier_names, engine_names = _stats_row_names()
    out = {
        "tiers": {str(t.kind).split(".")[-1].lower(): {n: getattr(t, n) for n in tier_names}
                  for t in es.tiers},
        "engine": {n: getattr(es, n) for n in engine_names},
    }
    if es.remote is not None:
        out["remote_store"] = dict(es.remote.as_dict())
    return out


# ---------------------------------------------------------------------------------------------
# Stats through vLLM's connector stats (KVConnectorLogging aggregates them per interval).

@dataclasses.dataclass
class KvtierConnectorStats(KVConnectorStats):
    def reset(self):
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for key, value in (other.data or {}).items():
            if isinstance(value, (int, float)):
                self.data[key] = self.data.get(key, 0) + value
        return self

    def reduce(self) -> dict[str, int | float]:
        return {k: v for k, v in sorted(self.data.items()) if isinstance(v, (int, float))}

    def is_empty(self) -> bool:
        return not any(self.data.values())


# ---------------------------------------------------------------------------------------------
# KV events for routers: the chunks kvtier holds, reported through vLLM's KV cache events
# (BlockStored / BlockRemoved with medium "kvtier:<tier>"), under vLLM's own block hashes, so a
# KV-aware router indexing vLLM's events sees kvtier's copies of the same blocks.
# docs/integration.md, "KV events for routers".
#
#   scheduler  _block_event_info puts a saved prompt's block hashes (request.block_hashes, as vLLM
#              converts them for its own events), token ids and LoRA into its SaveOp.
#   worker     when the store completes, _KvEventTracker looks the prompt up (the tier of each of
#              its chunks) and reports what changed; it keeps the prompt and looks it up again
#              from the reaper thread, at most every kv_events_interval_ms, a bounded number of
#              prompts each time: a chunk that moved reports BlockRemoved for its old medium and
#              BlockStored for its new one, a chunk gone BlockRemoved. The events travel with the
#              step's output (get_kv_connector_kv_cache_events).
#   scheduler  update_connector_output collects them; with several tensor-parallel ranks an event
#              is published once every rank has reported it (each rank holds its own shard).

KV_EVENTS_MEDIUM_PREFIX = "kvtier:"
_KV_EVENTS_INTERVAL_MS = 1000
_KV_EVENTS_MAX_PROMPTS = 4096
_KV_EVENTS_PROMPTS_PER_TICK = 128
_KV_EVENTS_MAX_QUEUED = 1 << 16     # Events waiting for a step (or for the other ranks)


def kv_events_settings(vllm_config, config: dict) -> dict | None:
    """The KV event settings, or None when the connector reports no events: "kv_events" true or
    false, or "auto" (default): on when vLLM publishes its own KV cache events
    (kv_events_config.enable_kv_cache_events)."""
    mode = config.get("kv_events", "auto")
    if mode == "auto":
        events_config = getattr(vllm_config, "kv_events_config", None)
        mode = bool(getattr(events_config, "enable_kv_cache_events", False))
    if not isinstance(mode, bool):
        raise RuntimeError(f'kvtier: kv_events must be true, false or "auto", not {mode!r}')
    settings = {}
    for key, default in (("kv_events_interval_ms", _KV_EVENTS_INTERVAL_MS),
                         ("kv_events_max_prompts", _KV_EVENTS_MAX_PROMPTS),
                         ("kv_events_prompts_per_tick", _KV_EVENTS_PROMPTS_PER_TICK)):
        value = config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RuntimeError(f"kvtier: {key} must be a positive integer, got {value!r}")
        settings[key[len("kv_events_"):]] = value
    return settings if mode else None


def _block_event_info(request, first: int, end: int, block_tokens: int, group: int,
                      hash_block_tokens: int) -> dict | None:
    """What the worker needs to report a prompt's whole chunks [first, end) as vLLM reports its
    own blocks: vLLM's block hashes (request.block_hashes at hash_block_tokens granularity, a
    block's hash being that of its last hash block; converted by vLLM's
    maybe_convert_block_hash), the parent of the first one, the LoRA and vLLM's per-block extra
    keys. None when vLLM has no hashes for them (no prefix hashing)."""
    from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

    hashes = list(getattr(request, "block_hashes", None) or [])
    scale = block_tokens // hash_block_tokens if block_tokens % hash_block_tokens == 0 else 0
    if end <= first or not scale or len(hashes) < end * scale:
        return None
    block = [maybe_convert_block_hash(hashes[(c + 1) * scale - 1]) for c in range(end)]
    lora = getattr(request, "lora_request", None)
    return {"first": first, "hashes": block[first:],
            "parent": block[first - 1] if first > 0 else None, "group": group,
            "lora_id": getattr(lora, "adapter_id", None) if lora is not None else None,
            "lora_name": getattr(lora, "name", None) if lora is not None else None,
            "extra_keys": _block_extra_keys(request, first, end, block_tokens)}


def _block_extra_keys(request, first: int, end: int, block_tokens: int):
    """vLLM's per-block extra keys of blocks [first, end), in the form its events carry them;
    None when this vLLM has none to give (or they do not apply)."""
    try:
        from vllm.v1.core.kv_cache_utils import (generate_block_hash_extra_keys,
                                                 to_event_extra_keys)

        keys, mm_index = [], 0
        for c in range(end):  # From block 0: the multimodal index runs through the prompt.
            extra, mm_index = generate_block_hash_extra_keys(request, c * block_tokens,
                                                             (c + 1) * block_tokens, mm_index)
            if c >= first:
                keys.append(extra)
        return to_event_extra_keys(keys)
    except Exception:  # noqa: BLE001 - another vLLM's request: the events go without them.
        return None


def _event_fields(cls, **fields):
    """fields, less those this vLLM's event class does not have (older ones lack a few)."""
    known = getattr(cls, "__struct_fields__", None)
    return cls(**{k: v for k, v in fields.items() if known is None or k in known})


class KvtierKVEvents(KVConnectorKVEvents):
    """One step's KV events of the workers, as (tensor-parallel rank, event) pairs: vLLM's
    KVOutputAggregator merges the workers' (add_events, increment_workers) and hands the result
    to the scheduler's update_connector_output, which counts the ranks of each event."""

    def __init__(self, rank=None, events=()):
        self._pairs = [(rank, event) for event in events]
        self._workers = 1

    def add_events(self, events) -> None:
        for item in events:
            self._pairs.append(item if isinstance(item, tuple) else (None, item))

    def aggregate(self) -> "KvtierKVEvents":
        return self

    def increment_workers(self, count: int = 1) -> None:
        self._workers += count

    def get_all_events(self) -> list:
        return list(self._pairs)

    def get_number_of_workers(self) -> int:
        return self._workers

    def clear_events(self) -> None:
        self._pairs = []

    def __repr__(self):
        return f"<KvtierKVEvents workers={self._workers} events={len(self._pairs)}>"


class _KvEventGather:
    """The scheduler's side: an event goes out once each of the `ranks` workers reported it
    (events a rank reports twice before the others caught up count once). At most
    _KV_EVENTS_MAX_QUEUED events wait for their ranks; older ones are dropped (counted)."""

    def __init__(self, ranks: int):
        self.ranks = ranks
        self.pending: dict = {}   # event -> the ranks that reported it, oldest first
        self.ready: list = []
        self.dropped = 0

    def add(self, pairs) -> None:
        for rank, event in pairs:
            if self.ranks <= 1 or rank is None:
                self.ready.append(event)
                continue
            seen = self.pending.setdefault(event, set())
            seen.add(rank)
            if len(seen) >= self.ranks:
                del self.pending[event]
                self.ready.append(event)
            elif len(self.pending) > _KV_EVENTS_MAX_QUEUED:
                del self.pending[next(iter(self.pending))]
                self.dropped += 1
        if len(self.ready) > _KV_EVENTS_MAX_QUEUED:
            self.dropped += len(self.ready) - _KV_EVENTS_MAX_QUEUED
            del self.ready[:-_KV_EVENTS_MAX_QUEUED]

    def take(self) -> list:
        ready, self.ready = self.ready, []
        return ready


@dataclasses.dataclass
class _TrackedPrompt:
    ns: tuple
    tokens: list          # The key tokens of chunks [0, first + len(hashes))
    info: dict            # _block_event_info's
    checked: float = 0.0


class _KvEventTracker:
    """The worker's side: the prompts whose chunks were reported (at most max_prompts, the
    oldest dropped without an event, counted in untracked), each chunk's medium as last
    reported (keyed by group and block hash, shared by the prompts holding it), and the events
    not yet handed to vLLM.

    stored(op) takes a completed store (any thread); tick(lookup, now) runs on the reaper
    thread: stores completed since the last tick are looked up at once (at most per_tick per
    tick, the rest at the next one), and at most every interval_ms the per_tick prompts checked
    longest ago are looked up again. lookup(ns, tokens) gives the medium of each chunk kvtier
    holds from the first on, or raises (counted in errors; nothing changes). A prompt none of
    whose chunks kvtier holds any more is no longer tracked. per_chunk: one event per chunk
    (with several ranks: each rank's events must be equal to be matched, and a rank may see a
    run of chunks change over two ticks), else one per run of chunks that changed together."""

    def __init__(self, block_tokens: int, settings: dict, per_chunk: bool = False):
        self.block_tokens = block_tokens
        self.interval_s = settings["interval_ms"] / 1000
        self.max_prompts = settings["max_prompts"]
        self.per_tick = settings["prompts_per_tick"]
        self.per_chunk = per_chunk
        self._lock = threading.Lock()     # _new, _out and the counters
        self._new: list = []              # _TrackedPrompts whose stores completed
        self._out: list = []              # Events for the next step
        self._prompts: dict = {}          # id -> _TrackedPrompt, oldest first (reaper thread)
        self._chunks: dict = {}           # (group, hash) -> [medium or None, prompts holding it]
        self._next_id = 0
        self._next_check = 0.0
        self._logged_error = False
        self.counters = {"kv_events_stored": 0, "kv_events_removed": 0, "kv_events_errors": 0,
                         "kv_events_untracked": 0, "kv_events_dropped": 0}

    def busy(self) -> bool:
        """Whether a tick has anything to do (the reaper thread runs while it has)."""
        return bool(self._new or self._prompts)

    def stored(self, op) -> None:
        info = op.events
        if not info or not info.get("hashes"):
            return
        end = (info["first"] + len(info["hashes"])) * self.block_tokens
        prompt = _TrackedPrompt(ns=op.ns, tokens=list(op.tokens[:end]), info=info)
        with self._lock:
            self._new.append(prompt)
            if len(self._new) > self.max_prompts:
                del self._new[0]
                self.counters["kv_events_untracked"] += 1

    def take(self) -> list:
        with self._lock:
            out, self._out = self._out, []
        return out

    def error(self, error) -> None:
        """Counts an error in kv_events_errors; the first one is logged."""
        with self._lock:
            self.counters["kv_events_errors"] += 1
        if not self._logged_error:
            self._logged_error = True
            logger.warning("kvtier: KV events: a lookup or check failed (no event; further "
                           "failures are counted in kv_events_errors): %r", error)

    def take_counters(self) -> dict:
        with self._lock:
            counters = dict(self.counters)
            for key in self.counters:
                self.counters[key] = 0
        return counters

    def tick(self, lookup, now: float) -> None:
        if not self._prompts:  # The first recheck comes an interval after tracking starts.
            self._next_check = now + self.interval_s
        elif now >= self._next_check:
            self._next_check = now + self.interval_s
            due = sorted(self._prompts, key=lambda i: self._prompts[i].checked)[:self.per_tick]
            for prompt_id in due:
                self._check(prompt_id, lookup, now)
        with self._lock:
            new, self._new = self._new[:self.per_tick], self._new[self.per_tick:]
        for prompt in new:
            self._track(prompt)
            self._check(self._next_id - 1, lookup, now)

    def _track(self, prompt) -> None:
        self._prompts[self._next_id] = prompt
        self._next_id += 1
        for h in prompt.info["hashes"]:
            self._chunks.setdefault((prompt.info["group"], h), [None, 0])[1] += 1
        while len(self._prompts) > self.max_prompts:
            self._untrack(next(iter(self._prompts)))
            with self._lock:
                self.counters["kv_events_untracked"] += 1

    def _untrack(self, prompt_id) -> None:
        prompt = self._prompts.pop(prompt_id)
        for h in prompt.info["hashes"]:
            key = (prompt.info["group"], h)
            entry = self._chunks.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._chunks[key]

    def _check(self, prompt_id, lookup, now: float) -> None:
        prompt = self._prompts.get(prompt_id)
        if prompt is None:
            return
        prompt.checked = now
        info = prompt.info
        try:
            media = list(lookup(prompt.ns, prompt.tokens))
        except Exception as e:  # noqa: BLE001 - a failed lookup changes nothing; counted.
            self.error(e)
            return
        removed, stored = [], []  # (chunk index in info["hashes"], medium)
        for i, h in enumerate(info["hashes"]):
            chunk = info["first"] + i
            medium = media[chunk] if chunk < len(media) else None
            entry = self._chunks[(info["group"], h)]
            if entry[0] != medium:
                if entry[0] is not None:
                    removed.append((i, entry[0]))
                if medium is not None:
                    stored.append((i, medium))
                entry[0] = medium
        events = [self._removed(info, run, medium) for run, medium in self._runs(removed)]
        events += [self._stored(prompt, run, medium) for run, medium in self._runs(stored)]
        if events:
            with self._lock:
                self.counters["kv_events_removed"] += len(removed)
                self.counters["kv_events_stored"] += len(stored)
                self._out.extend(events)
                if len(self._out) > _KV_EVENTS_MAX_QUEUED:
                    self.counters["kv_events_dropped"] += len(self._out) - _KV_EVENTS_MAX_QUEUED
                    del self._out[:-_KV_EVENTS_MAX_QUEUED]
        if all(self._chunks[(info["group"], h)][0] is None for h in info["hashes"]):
            self._untrack(prompt_id)  # kvtier holds none of its chunks any more.

    def _runs(self, changes):
        """[(chunk indexes, medium)]: consecutive chunks of one medium (one each: per_chunk)."""
        runs = []
        for i, medium in changes:
            if runs and not self.per_chunk and runs[-1][1] == medium and runs[-1][0][-1] == i - 1:
                runs[-1][0].append(i)
            else:
                runs.append(([i], medium))
        return runs

    @staticmethod
    def _removed(info, run, medium):
        from vllm.distributed.kv_events import BlockRemoved

        return _event_fields(BlockRemoved, block_hashes=[info["hashes"][i] for i in run],
                             medium=medium, group_idx=info["group"])

    def _stored(self, prompt, run, medium):
        from vllm.distributed.kv_events import BlockStored

        info, bs = prompt.info, self.block_tokens
        first = info["first"] + run[0]
        extra = info["extra_keys"]
        return _event_fields(
            BlockStored, block_hashes=[info["hashes"][i] for i in run],
            parent_block_hash=info["hashes"][run[0] - 1] if run[0] > 0 else info["parent"],
            token_ids=list(prompt.tokens[first * bs:(first + len(run)) * bs]), block_size=bs,
            lora_id=info["lora_id"], medium=medium, lora_name=info["lora_name"],
            extra_keys=[extra[i] for i in run] if extra else None, group_idx=info["group"])


# ---------------------------------------------------------------------------------------------
# The lookup channel: the scheduler asks the worker's engine. A Unix socket in a directory only
# this user can enter, authenticated with a key from a file only this user can read; messages are
# JSON (no pickle), one flat object: {"salt": str, "extra": [str, ...], "tokens": [int, ...]}.
#
# The server never lets one client hold up another or raise out of its thread: the handshake runs
# in the client's own thread with a deadline (a client that connects and never answers the
# challenge is dropped after _LOOKUP_AUTH_SECONDS, and the accept loop goes on meanwhile); a
# message that has started must arrive whole within _LOOKUP_MESSAGE_SECONDS; a message nested
# deeper than the schema, not JSON, or not of the schema gets {"matched": 0, "error": ...} and the
# connection keeps serving; one longer than _LOOKUP_MAX_BYTES closes the connection (its framing
# is lost). At most _LOOKUP_MAX_CLIENTS connections at once; more are closed at accept.

_LOOKUP_AUTH_SECONDS = 10.0
_LOOKUP_MESSAGE_SECONDS = 10.0
_LOOKUP_REPLY_SECONDS = 30.0     # The scheduler's wait for a reply: then a miss
_LOOKUP_MAX_CLIENTS = 64
_LOOKUP_MAX_BYTES = 64 << 20
_LOOKUP_MAX_DEPTH = 2            # The object, and the lists inside it
_LOOKUP_MAX_EXTRA = 64
_JSON_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _parse_lookup(data: bytes) -> dict:
    """A lookup request from its bytes, or ValueError naming what is wrong with it.

    The nesting is checked before json.loads (whose recursion a deep message would exhaust): a
    scan over strings and brackets only, so a valid message costs a few matches."""
    text = data.decode("utf-8")
    depth = 0
    for match in _JSON_STRUCTURE.finditer(text):
        c = match.group()
        if c in "[{":
            depth += 1
            if depth > _LOOKUP_MAX_DEPTH:
                raise ValueError(f"nested deeper than {_LOOKUP_MAX_DEPTH} levels")
        elif c in "]}":
            depth -= 1
    try:
        request = json.loads(text)
    except RecursionError as e:  # Not reachable after the scan; kept as a bound of its own.
        raise ValueError("nested too deep") from e
    if not isinstance(request, dict):
        raise ValueError("not a JSON object")
    salt, extra, tokens = request.get("salt"), request.get("extra"), request.get("tokens")
    if not isinstance(salt, str):
        raise ValueError("salt must be a string")
    if (not isinstance(extra, list) or len(extra) > _LOOKUP_MAX_EXTRA
            or not all(isinstance(x, str) for x in extra)):
        raise ValueError(f"extra must be a list of at most {_LOOKUP_MAX_EXTRA} strings")
    if not isinstance(tokens, list) or not all(type(t) is int and 0 <= t < 1 << 32
                                               for t in tokens):
        raise ValueError("tokens must be a list of integers in [0, 2^32)")
    return {"salt": salt, "extra": extra, "tokens": tokens}


def _set_socket_timeout(conn, seconds: float) -> None:
    """Bounds every blocking read and write on the connection's socket (SO_RCVTIMEO/SNDTIMEO):
    a read that waits longer fails with an OSError instead of blocking its thread forever."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        whole = int(seconds)
        timeval = struct.pack("ll", whole, int((seconds - whole) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    finally:
        sock.close()


def _runtime_dir(config: dict) -> str:
    path = config.get("runtime_dir") or os.path.join(tempfile.gettempdir(),
                                                     f"kvtier-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise RuntimeError(f"kvtier: runtime directory {path} must be a directory owned by this "
                           "user with mode 0700 (it holds the connector's lookup socket)")
    return path


def _socket_path(config: dict, engine_id: str, rank: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", engine_id)[:64]
    return os.path.join(_runtime_dir(config), f"{safe}.tp{rank}.sock")


class _LookupServer:
    """Serves lookups on a Unix socket, one thread per authenticated client (see above).

    handle(request) answers a parsed request with the matched token count; on_reject(kind) is
    called for each refused client or message ("handshake", "malformed", "clients")."""

    def __init__(self, path: str, handle, on_reject=None):
        self.path = path
        self.handle = handle
        self.on_reject = on_reject or (lambda kind: None)
        if os.path.exists(path):
            os.unlink(path)
        self.key = os.urandom(32)
        key_path = path + ".key"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.key)
        # No authkey here: Listener.accept would run the handshake in the accept loop, where a
        # silent client blocks every other one. _client runs it with a deadline instead.
        self.listener = Listener(path, family="AF_UNIX")
        self.closed = False
        self._lock = threading.Lock()
        self._clients: set = set()
        self._logged: set[str] = set()
        self.thread = threading.Thread(target=self._serve, name="kvtier-lookup", daemon=True)
        self.thread.start()

    def _reject(self, kind: str, detail) -> None:
        if kind not in self._logged:  # Once per kind: a flood must not flood the log.
            self._logged.add(kind)
            logger.warning("kvtier lookup channel: refused a %s client or message (%s); further "
                           "ones are counted in lookup_rejects", kind, detail)
        try:
            self.on_reject(kind)
        except Exception:  # noqa: BLE001 - a counter must not stop the server.
            pass

    def _serve(self):
        while not self.closed:
            try:
                conn = self.listener.accept()
            except OSError:  # Closed, or out of descriptors for a moment.
                if not self.closed:
                    time.sleep(0.05)
                continue
            with self._lock:
                full = len(self._clients) >= _LOOKUP_MAX_CLIENTS
                if not full:
                    self._clients.add(conn)
            if full:
                conn.close()
                self._reject("clients", f"more than {_LOOKUP_MAX_CLIENTS} connections")
                continue
            threading.Thread(target=self._client, args=(conn,), name="kvtier-lookup-client",
                             daemon=True).start()

    def _client(self, conn):
        try:
            _set_socket_timeout(conn, _LOOKUP_AUTH_SECONDS)
            try:
                deliver_challenge(conn, self.key)
                answer_challenge(conn, self.key)
            except (OSError, EOFError, AuthenticationError) as e:
                self._reject("handshake", e)
                return
            _set_socket_timeout(conn, _LOOKUP_MESSAGE_SECONDS)
            while not self.closed:
                try:
                    if not conn.poll(1.0):  # Idle is fine; a started message has a deadline.
                        continue
                    data = conn.recv_bytes(maxlength=_LOOKUP_MAX_BYTES)
                except (EOFError, OSError):  # Gone, stalled mid-message, or too long.
                    return
                conn.send_bytes(json.dumps(self._answer(data)).encode())
        except Exception as e:  # noqa: BLE001 - one client's failure must not escape its thread.
            self._reject("failed", e)
        finally:
            with self._lock:
                self._clients.discard(conn)
            conn.close()

    def _answer(self, data: bytes) -> dict:
        try:
            request = _parse_lookup(data)
        except ValueError as e:
            self._reject("malformed", e)
            return {"matched": 0, "error": f"malformed lookup message: {e}"}
        try:
            return {"matched": int(self.handle(request))}
        except Exception as e:  # noqa: BLE001 - reported to the scheduler as a miss.
            return {"matched": 0, "error": str(e)}

    def close(self):
        self.closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        for p in (self.path, self.path + ".key"):
            try:
                os.unlink(p)
            except OSError:
                pass


class _LookupClient:
    """The scheduler's end of one rank's lookup channel. lookup() never raises: an unreachable,
    slow (no reply within _LOOKUP_REPLY_SECONDS) or failing channel is a miss, logged once and
    passed to on_error. Connecting waits up to _LOOKUP_CONNECT_SECONDS after the first lookup
    (the worker may still be starting); after that a reconnection is tried at most once a
    second, and a lookup meanwhile is an immediate miss."""

    def __init__(self, path: str, on_error=None):
        self.path = path
        self.conn = None
        self.warned = False
        self.on_error = on_error or (lambda: None)
        self.first_deadline = None
        self.next_try = 0.0

    def lookup(self, ns: tuple, tokens: list) -> int:
        try:
            message = json.dumps({"salt": ns[0], "extra": list(ns[1]),
                                  "tokens": tokens}).encode()
        except (TypeError, ValueError) as e:
            return self._miss(e)
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = self._connect()
                self.conn.send_bytes(message)
                if not self.conn.poll(_LOOKUP_REPLY_SECONDS):
                    raise TimeoutError(f"no reply within {_LOOKUP_REPLY_SECONDS} s")
                reply = json.loads(self.conn.recv_bytes(maxlength=1 << 20))
                if reply.get("error"):
                    return self._miss(reply["error"])
                return max(0, int(reply.get("matched", 0)))
            except Exception as e:  # noqa: BLE001 - any failure of the channel is a miss.
                self._drop()
                if attempt == 1 or isinstance(e, TimeoutError):
                    return self._miss(e)
        return 0

    def _miss(self, error) -> int:
        if not self.warned:
            logger.warning("kvtier lookup through %s failed (a miss; further failures are "
                           "counted in lookup_errors): %s", self.path, error)
            self.warned = True
        self.on_error()
        return 0

    def _drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = None

    def _connect(self):
        now = time.monotonic()
        if self.first_deadline is None:  # The worker may still be starting: wait for it once.
            self.first_deadline = now + _LOOKUP_CONNECT_SECONDS
        elif now < self.next_try:
            raise ConnectionError("the lookup channel is down (retried once a second)")
        self.next_try = now + 1.0
        while True:
            try:
                with open(self.path + ".key", "rb") as f:
                    key = f.read()
                return Client(self.path, family="AF_UNIX", authkey=key)
            except (FileNotFoundError, ConnectionRefusedError):  # Not listening yet.
                if time.monotonic() > self.first_deadline:
                    raise
                time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# The node service (kv_connector_extra_config "server"): both processes connect to it.

def _server_path(config: dict) -> str | None:
    """The service's socket path from "server" ("unix:/path"), None without one."""
    address = config.get("server")
    if address is None:
        return None
    if not isinstance(address, str) or not address.startswith("unix:") or len(address) <= 5:
        raise RuntimeError(f"kvtier: server must be \"unix:/path/to/kvtier.sock\", got "
                           f"{address!r}")
    return address[5:]


def _server_settings(config: dict) -> dict:
    """kvtier.connect's keyword arguments (but the layout and name) from the config."""
    token = _read_secret(config, "server_token_file", "server_token_env")
    settings = {"token": token.decode() if token else None}
    for key, default in (("server_timeout_ms", _SERVER_TIMEOUT_MS),
                         ("server_reconnect_interval_ms", _SERVER_RECONNECT_MS)):
        value = config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RuntimeError(f"kvtier: {key} must be a positive integer (ms), got {value!r}")
        settings[key[len("server_"):]] = value
    return settings


def _rank_key(rank: int, tp_size: int) -> str:
    """The extra key of a tensor-parallel rank's shard of the KV, on the service."""
    return f"tp:{rank}/{tp_size}"


class _ServiceLookup:
    """The scheduler's connection to the node service. lookup() never raises: a service that is
    not reachable (not started yet, dead, slow) is a miss, logged once and passed to on_error.
    The connection is made at the first lookup (without a layout: the service's own is used)
    and retried at most every reconnect interval until it succeeds; afterwards the connection
    reconnects by itself, and its lookups are misses while the service is down."""

    def __init__(self, path: str, settings: dict, name: str, tp_size: int, on_error=None):
        self.path = path
        self.settings = settings
        self.name = name
        self.tp_size = tp_size
        self.on_error = on_error or (lambda: None)
        self.engine = None
        self.next_try = 0.0
        self.warned = False
        self.namespaces: dict[tuple, Any] = {}

    def _connect(self):
        now = time.monotonic()
        if now < self.next_try:
            raise ConnectionError(f"the kvtier service at {self.path} is not reachable "
                                  "(retried every server_reconnect_interval_ms)")
        self.next_try = now + self.settings["reconnect_interval_ms"] / 1000
        self.engine = kvtier.connect(self.path, name=self.name, **self.settings)
        logger.info("kvtier: scheduler connected to the kvtier service at %s (%s)", self.path,
                    self.engine.layout)

    def _namespace(self, tenant: str, extra: tuple):
        key = (tenant, extra)
        ns = self.namespaces.get(key)
        if ns is None:
            ns = self.engine.make_namespace(salt=tenant, extra_keys=list(extra))
            if len(self.namespaces) > 4096:
                self.namespaces.clear()
            self.namespaces[key] = ns
        return ns

    def lookup(self, ns: tuple, tokens: list) -> int:
        """The tokens every rank's shard has cached (min over the ranks)."""
        try:
            if self.engine is None:
                self._connect()
            hit = None
            for rank in range(self.tp_size):
                extra = tuple(ns[1]) + (_rank_key(rank, self.tp_size),)
                matched = self.engine.lookup(self._namespace(ns[0], extra), tokens).matched_tokens
                hit = matched if hit is None else min(hit, matched)
            return max(0, int(hit or 0))
        except Exception as e:  # noqa: BLE001 - any failure of the service is a miss.
            if not self.warned:
                logger.warning("kvtier: lookup on the kvtier service at %s failed (a miss; "
                               "further failures are counted in lookup_errors): %s",
                               self.path, e)
                self.warned = True
            self.on_error()
            return 0

    def close(self):
        if self.engine is not None:
            self.engine.close()


class _RankLookup:
    """A _LookupClient-shaped view of the service: the scheduler asks it once (all ranks)."""

    def __init__(self, service: _ServiceLookup):
        self.service = service

    def lookup(self, ns: tuple, tokens: list) -> int:
        return self.service.lookup(ns, tokens)


# ---------------------------------------------------------------------------------------------

def cpu_page_layout(vllm_config) -> str | None:
    """How vLLM's CPU attention lays out a page on this machine: its attention ISA ("vec",
    "vec16", "amx", ...) decides where each token's K sits inside a page (vec: per head a
    [head_dim][tokens] K and a [tokens][head_dim] V; amx: packed for its tiles). kvtier moves
    pages byte for byte, so a page of one ISA is not another's KV. None off vLLM's CPU platform,
    or when this vLLM does not say."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return None
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        model, cache = vllm_config.model_config, vllm_config.cache_config
        return str(_get_attn_isa(model.dtype, cache.block_size, model.get_head_size(),
                                 getattr(cache, "cache_dtype", None)))
    except Exception:  # noqa: BLE001 - another vLLM version, or no model: nothing known.
        return None


# The CPU attention ISA whose pages kvtier knows element by element (per head K [head_dim][tokens],
# V [tokens][head_dim]: core/paged_layout.h kVllmCpuVec), so that it can gather them into
# canonical blocks, a token's K and V rows one row per token. Other ISAs' pages (amx packs K for
# its tiles; vec16) are only moved byte for byte.
CANONICAL_CPU_ISA = "vec"
# The codecs that store every byte as it is: the only ones that do not depend on which element
# of a block is which token and channel.
LOSSLESS_CODECS = ("identity", "shuffle-zstd")


def canonical_cpu_pages(config: dict, mla: bool, page_layout: str | None) -> bool:
    """Whether the connector gathers vLLM's CPU pages into canonical blocks (backend
    vllm_cpu_vec): for a lossy codec over "vec" pages, whose quantization groups must be
    channels and tokens. Lossless codecs keep the byte-for-byte move (backend vllm_cpu), which
    costs less (a transpose of every K page: 3-4 ms more per 4096-token load of a
    TinyLlama-shaped model, 5-7 ms per save; bench/paged_gather.py). With "server" the codec is the service's."""
    return (not mla and page_layout == CANONICAL_CPU_ISA and not config.get("server")
            and str(config.get("codec", "identity")) not in LOSSLESS_CODECS)


def _refuse_codec_over_unknown_axes(config: dict, mla: bool, page_layout: str | None) -> None:
    """A lossy codec quantizes K per channel and V per token (docs/codecs.md): over pages kvtier
    moves byte for byte without knowing which element is which (an ISA other than "vec", or one
    this vLLM does not name), its groups would mix channels and tokens, and its measured
    precision would not hold. Refused at startup, naming the codecs that work."""
    codec = str(config.get("codec", "identity"))
    if codec in LOSSLESS_CODECS or mla or page_layout == CANONICAL_CPU_ISA or \
            config.get("server"):
        return
    raise RuntimeError(
        f"kvtier: codec {codec!r} is not lossless, and a lossy codec quantizes K per channel "
        f"and V per token, but vLLM's CPU attention here writes its pages with the "
        f"{page_layout or 'unknown'} ISA, whose element order kvtier does not know (it moves "
        "those pages byte for byte); use \"codec\": \"identity\" or \"shuffle-zstd\", or a "
        f"machine whose pages use the {CANONICAL_CPU_ISA!r} ISA")


def allow_amx() -> bool:
    """Asks Linux for this process's AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, through
    torch); True when granted. vLLM's CPU attention with its amx ISA runs tile instructions
    without asking for it: torch's oneDNN asks when one of its own AMX kernels first runs, which
    a fresh vLLM may not reach before attention when the first prompt's prefix comes from
    kvtier, and a tile instruction without the permission is SIGILL (Linux's AMX rule)."""
    try:
        import torch

        return bool(torch._C._cpu._init_amx())
    except (ImportError, AttributeError):  # Another torch: nothing to ask with.
        return False


def _latent_slot_zeroer(layer, page: int, first_slot: int):
    """zero(layer, page, first_slot) for MLA pages [pages, slots, latent]: a token's latent is a
    plain row in every ISA (vLLM's MLA cache writer indexes the rows directly)."""
    layer[page, first_slot:].zero_()


def mla_latent_layout(spec, first) -> dict | None:
    """The latent layout's geometry {kv_heads, head_dim, kind} of an MLA layer (vLLM's
    MLAAttentionSpec, one tensor per layer of one latent vector per token, kv_lora_rank + rope
    dim: [pages, page_tokens, latent], or [pages, 1, page_tokens, latent] as vLLM's CPU_MLA shows
    it), or None for a K/V layer. A spec that says MLA with a tensor of another shape is refused:
    kvtier would copy the wrong bytes (DescribePagedLayer checks the strides too)."""
    is_mla = type(spec).__name__ == "MLAAttentionSpec" or (spec is None and first.dim() == 3)
    if not is_mla:
        return None
    width = int(getattr(spec, "head_size", None) or first.shape[-1])
    shape = list(first.shape)
    if not (len(shape) == 3 or (len(shape) == 4 and shape[1] == 1)) or shape[-1] != width:
        raise RuntimeError(f"KvtierConnector: an MLA KV cache layer of shape {shape} is not "
                           f"[pages, (1,) page_tokens, {width}] (one latent vector per token)")
    return dict(kv_heads=1, head_dim=width, kind="latent")


def _cpu_slot_zeroer(isa: str, dtype):
    """A function zero(layer, page, first_slot) that writes zeros into a page's slots from
    first_slot on with vLLM's own cache writer (so in this ISA's layout), or None when this vLLM
    has none."""
    try:
        from vllm import _custom_ops as ops

        write = ops.cpu_attn_reshape_and_cache
    except (ImportError, AttributeError):
        return None

    def zero(layer, page: int, first_slot: int):
        pages, heads, slots, width = layer.shape
        n = slots - first_slot
        zeros = torch.zeros((n, heads, width // 2), dtype=dtype)
        key, value = layer.view(pages, heads, 2 * slots, width // 2).chunk(2, dim=2)
        mapping = torch.arange(page * slots + first_slot, (page + 1) * slots, dtype=torch.int64)
        write(zeros, zeros, key, value, mapping, isa)

    return zero


def _extra(vllm_config) -> dict:
    config = vllm_config.kv_transfer_config
    return dict(getattr(config, "kv_connector_extra_config", None) or {})


# The kinds of kv_connector_extra_config's values, as _check_config reads them.
_INT, _BOOL, _STR, _STRS, _TEXT = "int", "bool", "str", "strs", "text"
# Every key the connector reads, with its kind; None: checked where it is read (partial_chunks,
# kv_events*, server*, default_tenant have their own messages).
_CONFIG_KEYS = {
    "host_bytes": _INT, "ssd_dirs": _STRS, "ssd_bytes": _INT, "ssd_segment_bytes": _INT,
    "write_policy": _STR, "ssd_sync": _STR, "worker_threads": _INT, "thread_cpus": _TEXT,
    "background_nice": _INT, "background_priority": _STR, "writeback_age_ms_max": _INT,
    "codec": _STR, "codec_level": _INT, "ssd_key_file": _STR, "ssd_key_env": _STR,
    "remote_endpoints": _STRS, "remote_cluster": _BOOL, "remote_write_policy": _STR,
    "remote_connections": _INT, "remote_user": _STR, "remote_password_env": _STR,
    "remote_key_file": _STR, "remote_key_env": _STR, "remote_insecure_plaintext": _BOOL,
    "fs_dir": _STR, "fs_bytes_max": _INT, "fs_max_age_s": _INT, "fs_sweep_interval_ms": _INT,
    "fs_fsync": _BOOL, "fs_group_shared": _BOOL, "salt": _TEXT, "tenant_secret_file": _STR,
    "tenant_secret_env": _STR, "default_tenant": None, "model_name": _STR, "stats_file": _STR,
    "runtime_dir": _STR, "warm_staging_bytes": _INT, "partial_chunks": None, "kv_events": None,
    "kv_events_interval_ms": None, "kv_events_max_prompts": None,
    "kv_events_prompts_per_tick": None, "server": None, "server_token_file": _STR,
    "server_token_env": _STR, "server_timeout_ms": None, "server_reconnect_interval_ms": None,
}


def _config_value(key: str, kind: str | None, value):
    """`value` of `key` as its kind wants it, or RuntimeError naming the key and what it takes.
    Integers may be given as decimal strings and booleans as "true"/"false" (any case), as JSON
    written by hand has them; bool("false") would otherwise be True."""
    if kind == _INT:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            return int(value)
        raise RuntimeError(f"kvtier: {key} must be an integer, got {value!r}")
    if kind == _BOOL:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise RuntimeError(f"kvtier: {key} must be true or false, got {value!r}")
    if kind == _STR:
        if isinstance(value, str):
            return value
        raise RuntimeError(f"kvtier: {key} must be a string, got {value!r}")
    if kind == _TEXT:  # A salt or a CPU list may be a bare number: its decimal text.
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
        raise RuntimeError(f"kvtier: {key} must be a string, got {value!r}")
    if kind == _STRS:  # One string is a list of one (a single directory or endpoint).
        values = [value] if isinstance(value, str) else value
        if isinstance(values, (list, tuple)) and all(isinstance(v, str) for v in values):
            return list(values)
        raise RuntimeError(f"kvtier: {key} must be a string or a list of strings, got {value!r}")
    return value


def _check_config(config: dict, extra_keys: dict) -> dict:
    """kv_connector_extra_config with every value of its kind (_config_value), or RuntimeError
    for a key the connector does not read, naming the nearest one it does: a typo ("host_byte")
    would otherwise leave its setting at the default without a word."""
    keys = {**_CONFIG_KEYS, **extra_keys}
    out = {}
    for key, value in config.items():
        if key not in keys:
            near = difflib.get_close_matches(str(key), keys, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise RuntimeError(f"kvtier: unknown key {str(key)[:64]!r} in "
                               f"kv_connector_extra_config{hint} (docs/integration.md lists the "
                               "keys)")
        out[key] = _config_value(key, keys[key], value)
    return out


_MIN_TENANT_SECRET_BYTES = 16


def _read_secret(config: dict, file_key: str, env_key: str) -> bytes | None:
    if config.get(file_key):
        return read_secret_file(config[file_key], file_key)
    if config.get(env_key):
        value = os.environ.get(config[env_key])
        if not value:
            raise RuntimeError(f"kvtier: {env_key} names {config[env_key]}, which is not set")
        return value.encode()
    return None


def _read_tenant_secret(config: dict) -> bytes | None:
    """The tenant secret, refused at startup when it is too short to be one (every request would
    otherwise fail to derive its salt)."""
    secret = _read_secret(config, "tenant_secret_file", "tenant_secret_env")
    if secret is not None and len(secret) < _MIN_TENANT_SECRET_BYTES:
        source = config.get("tenant_secret_file") or f"${config.get('tenant_secret_env')}"
        raise RuntimeError(f"kvtier: the tenant secret from {source} is {len(secret)} bytes; it "
                           f"must be at least {_MIN_TENANT_SECRET_BYTES} (e.g. `openssl rand "
                           "-hex 32`)")
    default = config.get("default_tenant")
    if default is not None and (not isinstance(default, str) or not default):
        raise RuntimeError("kvtier: default_tenant must be a non-empty string (the tenant id of "
                           "requests without a cache_salt)")
    return secret


def _scheduler_hook(default, recover=None):
    """Scheduler hooks run in vLLM's engine core, where an exception stops the server. This turns
    an unexpected error into a log line and a scheduler_errors count; the hook then returns
    recover(self, *args) (when it returns something) or default(): a miss, no load, no store."""
    def wrap(method):
        @functools.wraps(method)
        def guarded(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - degrade, never raise into the scheduler.
                self._scheduler_error(method.__name__, e)
            if recover is not None:
                try:
                    result = recover(self, *args, **kwargs)
                    if result is not None:
                        return result
                except Exception as e:  # noqa: BLE001
                    self._scheduler_error(method.__name__ + " recovery", e)
            return default()
        return guarded
    return wrap


class KvtierConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM KV connector on a kvtier engine (host memory, SSD, Redis tiers)."""

    # kv_connector_extra_config keys a subclass reads besides the connector's own, with their
    # kinds (_CONFIG_KEYS).
    _EXTRA_CONFIG_KEYS: dict = {}

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._config = _check_config(_extra(vllm_config), self._EXTRA_CONFIG_KEYS)
        self._block_size = vllm_config.cache_config.block_size
        self._partial = self._config.get("partial_chunks", True)
        if not isinstance(self._partial, bool):
            raise RuntimeError(f"kvtier: partial_chunks must be true or false, not "
                               f"{self._partial!r}")
        # Pages of one CPU attention ISA are not another's KV: the ISA enters every key. MLA
        # pages hold plain latent rows in every ISA (and their layout's digest is its own).
        self._mla = bool(getattr(vllm_config.model_config, "use_mla", False))
        # Refuses, at startup, a model with layers kvtier cannot cache (state-space, ...).
        self._groups = cache_groups(kv_cache_config, self._block_size)
        self._page_layout = None if self._mla else cpu_page_layout(vllm_config)
        if self._page_layout is not None and "amx" in self._page_layout:
            allow_amx()
        _refuse_codec_over_unknown_axes(self._config, self._mla, self._page_layout)
        self._canonical = canonical_cpu_pages(self._config, self._mla, self._page_layout)
        parallel = vllm_config.parallel_config
        self._tp_size = parallel.tensor_parallel_size
        if parallel.pipeline_parallel_size != 1:
            raise RuntimeError("KvtierConnector: pipeline parallelism is not supported")
        self._engine_id = str(vllm_config.kv_transfer_config.engine_id)
        model = vllm_config.model_config
        self._model_name = self._config.get(
            "model_name", f"{model.model}|{getattr(model, 'revision', None) or ''}|{model.dtype}")
        self._server = None
        self._server_path = _server_path(self._config)
        if self._server_path is not None:
            self._init_server_settings(role)
        self._tenant_secret = _read_tenant_secret(self._config)
        self._default_tenant = self._config.get("default_tenant")
        self._kv_events = kv_events_settings(vllm_config, self._config)
        self._salt = str(self._config.get("salt", ""))
        policy = getattr(vllm_config.kv_transfer_config, "kv_load_failure_policy", "recompute")
        if role == KVConnectorRole.SCHEDULER and policy != "recompute":
            logger.warning("kvtier: kv_load_failure_policy is %r: a block that fails kvtier's "
                           "verification fails its request; set \"kv_load_failure_policy\": "
                           "\"recompute\" in --kv-transfer-config to recompute it instead",
                           policy)
        if role == KVConnectorRole.SCHEDULER:
            self._init_scheduler()
        else:
            self._init_worker()

    def _init_server_settings(self, role):
        """With "server": the service's connection settings; refuses tenant secrets of vLLM's
        own and warns (in the scheduler) of engine keys the service's tiers make moot."""
        self._server_settings = _server_settings(self._config)
        if self._config.get("tenant_secret_file") or self._config.get("tenant_secret_env"):
            raise RuntimeError("kvtier: with \"server\", the kvtier service derives tenant "
                               "salts with its own secret: set tenant_secret on `kvtier "
                               "serve`, not tenant_secret_file/_env in vLLM")
        ignored = [k for k in _ENGINE_KEYS if k in self._config]
        if ignored and role == KVConnectorRole.SCHEDULER:
            logger.warning("kvtier: with \"server\" the tiers are the kvtier service's; "
                           "ignored: %s", ", ".join(ignored))

    def _init_scheduler(self):
        """The scheduler's side: one log line on the groups, the lookup clients (of the service,
        or of each rank's worker) and the per-request state."""
        logger.info("kvtier: KV cache groups: %s; cached: %s; tensor-parallel ranks: %d",
                    "; ".join(g.describe() for g in self._groups),
                    ", ".join(f"group {g.index} " + (
                        "every chunk of a prompt" if g.kind != "sliding" else
                        "the chunks of the window before a prompt's first uncomputed "
                        "token") for g in self._groups), self._tp_size)
        if self._server_path is not None:
            self._service = _ServiceLookup(self._server_path, self._server_settings,
                                           f"vllm:{self._engine_id}:scheduler",
                                           self._tp_size, on_error=self._lookup_error)
            self._clients = [_RankLookup(self._service)]
        else:
            self._clients = [_LookupClient(_socket_path(self._config, self._engine_id, r),
                                           on_error=self._lookup_error)
                             for r in range(self._tp_size)]
        self._sched_lock = threading.Lock()
        self._sched_counters = self._zero_sched_counters()
        self._sched_interval = self._zero_sched_counters()
        self._logged_errors: set[str] = set()
        self._requests: dict[str, Any] = {}      # req_id -> Request
        self._ns: dict[str, tuple | None] = {}   # req_id -> namespace, None: not cached
        self._controls: dict[str, dict] = {}     # req_id -> its "kvtier" controls
        # req_id -> (local tokens, hit tokens); a hit may end inside a chunk (partial_chunks).
        self._hits: dict[str, tuple] = {}
        self._loads: dict[str, list] = {}        # Decided, not yet sent: LoadOps.
        self._blocks: dict[str, list] = {}       # req_id -> per group, the request's pages
        self._saved: set[str] = set()
        # KV events: the workers' events, out once every rank has reported them.
        self._event_gather = _KvEventGather(self._tp_size) if self._kv_events else None

    def _init_worker(self):
        """A worker's side: the engine (opened in register_kv_caches), its caches and the state
        of its loads, saves and statistics."""
        self._engine = None
        self._caches: list = []                  # Per KV cache group, its paged cache
        self._layer_group: dict[str, int] = {}   # Layer name -> its group
        self._layer_index: dict[str, int] = {}
        self._namespaces: dict[tuple, Any] = {}
        self._active_loads: list = []            # (LoadOp, PagedLoad)
        self._active_saves: list = []            # (SaveOp, PagedSave) gathering this step
        self._saves_meta = None                  # The metadata _active_saves were made for
        self._pending_saves: list = []           # Committed, store in flight
        # _pending_saves and the saves in it, shared with the reaper thread (below).
        self._saves_lock = threading.Lock()
        self._reaper = None                      # Runs while stores are in flight
        self._closing = False
        self._failed_pages: set[int] = set()
        self._stats_lock = threading.Lock()
        self._stats_write_lock = threading.Lock()
        self._counters = self._zero_counters()
        self._interval = self._zero_counters()
        self._rank = 0
        self._stats_written = ()
        self._previous_handlers: dict[int, Any] = {}  # Signals flushed on, and vLLM's handlers
        self._signal_flushed = False
        # KV events: the chunks this worker reported, rechecked from the reaper thread.
        self._event_tracker = (_KvEventTracker(self._block_size, self._kv_events,
                                               per_chunk=self._tp_size > 1)
                               if self._kv_events else None)

    # ------------------------------------------------------------------ namespaces

    def _request_ns(self, request) -> tuple | None:
        """(salt, extra_keys) of a request: the deployment salt, its tenant, its LoRA; None when
        the request is not cached (a tenant secret is set and it has no cache_salt, and no
        default_tenant is configured)."""
        cache_salt = getattr(request, "cache_salt", None) or ""
        salt = self._salt
        extra = []
        if self._server_path is not None:
            # The service derives the namespace from the tenant id (and this client's uid); the
            # deployment salt and the model are extra keys (the service's model may differ).
            salt = cache_salt or self._default_tenant or ""
            extra.append("model:" + self._model_name)
            if self._salt:
                extra.append("salt:" + self._salt)
        elif self._tenant_secret is not None:
            tenant = cache_salt or self._default_tenant
            if not tenant:
                return None
            salt = salt + "|" + kvtier.derive_tenant_salt(tenant, self._tenant_secret)
        elif cache_salt:
            extra.append("cache_salt:" + cache_salt)
        lora = getattr(request, "lora_request", None)
        if lora is not None:
            extra.append(f"lora:{getattr(lora, 'lora_name', '')}:"
                         f"{getattr(lora, 'lora_path', '') or getattr(lora, 'path', '')}")
        if self._canonical:  # Gathered into canonical blocks.
            extra.append("pages:vllm_cpu_vec")
        elif self._page_layout is not None:
            extra.append("pages:vllm_cpu/" + self._page_layout)
        elif self._mla:
            extra.append("pages:vllm_mla")
        return (salt, extra)

    # ------------------------------------------------------------------ scheduler side
    # Every hook here is wrapped by _scheduler_hook: an unexpected error is a miss (or no store),
    # logged and counted in scheduler_errors, never an exception in vLLM's engine core.

    @staticmethod
    def _zero_sched_counters() -> dict:
        return {"scheduler_errors": 0, "lookup_errors": 0, "unsalted_requests": 0,
                "bad_transfer_params": 0, "unloaded_requests": 0, "unsaved_requests": 0,
                "kv_events_published": 0, "kv_events_dropped": 0}

    def _count_sched(self, **deltas):
        with self._sched_lock:
            for k, v in deltas.items():
                self._sched_counters[k] += v
                self._sched_interval[k] += v

    def _scheduler_error(self, hook: str, error: Exception) -> None:
        self._count_sched(scheduler_errors=1)
        if hook not in self._logged_errors:  # Once per hook; every one is counted.
            self._logged_errors.add(hook)
            logger.error("kvtier: %s failed (a miss / no store for the request; further errors "
                         "are counted in scheduler_errors): %r", hook, error, exc_info=error)

    def _lookup_error(self) -> None:
        self._count_sched(lookup_errors=1)

    def scheduler_stats(self) -> dict:
        """The scheduler's counters: scheduler_errors, lookup_errors, unsalted_requests,
        bad_transfer_params, unloaded_requests and unsaved_requests (asked by the request)."""
        with self._sched_lock:
            return dict(self._sched_counters)

    def _ns_of(self, request) -> tuple | None:
        """The request's namespace, made once (counted when the request is not cached)."""
        req_id = request.request_id
        if req_id not in self._ns:
            ns = self._request_ns(request)
            if ns is None:
                self._count_sched(unsalted_requests=1)
            self._ns[req_id] = ns
        return self._ns[req_id]

    def _controls_of(self, request) -> dict:
        """The request's "kvtier" controls, parsed once; a request whose controls do not parse is
        neither loaded nor stored, logged (once per message) and counted in bad_transfer_params."""
        req_id = request.request_id
        if req_id not in self._controls:
            controls, why = _request_controls(getattr(request, "kv_transfer_params", None))
            if why is None:  # Counted once per request that asked.
                self._count_sched(unloaded_requests=int(not controls["load"]),
                                  unsaved_requests=int(not controls["save"]))
            else:
                self._count_sched(bad_transfer_params=1)
                if why not in self._logged_errors and len(self._logged_errors) < 256:
                    self._logged_errors.add(why)
                    logger.warning("kvtier: request %s is neither loaded nor stored: %s",
                                   req_id, why)
            self._controls[req_id] = controls
        return self._controls[req_id]

    def _no_hit(self, request, num_computed_tokens, *args, **kwargs):
        self._hits[request.request_id] = (num_computed_tokens, num_computed_tokens)

    def _lookup_chunks(self, prompt) -> int:
        """The chunks of `prompt` a hit may load: whole chunks and, with partial_chunks, the one
        holding the last prompt token when the tokens before it are worth loading; without,
        whole chunks that leave the last prompt token out."""
        bs = self._block_size
        if not self._partial:
            return (len(prompt) - 1) // bs
        chunks = -(-len(prompt) // bs)
        # A partial chunk of one token would load nothing (that token is vLLM's to compute).
        return chunks - 1 if len(prompt) % bs == 1 else chunks

    def _group_ns(self, ns: tuple, group: CacheGroup) -> tuple:
        """The namespace of one KV cache group's chunks (the request's own with one group)."""
        if len(self._groups) == 1:
            return ns
        return (ns[0], list(ns[1]) + [group.key()])

    def _windows_cached(self, ns: tuple, prompt, hit: int) -> bool:
        """Whether every sliding-window group has the chunks of the window before token `hit`
        (looked up from the last one back: a miss ends the search)."""
        bs = self._block_size
        for group in self._groups:
            if group.kind != "sliding":
                continue
            first = window_start_chunk(group, hit, bs)
            keys = window_chunk_keys(prompt, first, -(-hit // bs), bs)
            gns = self._group_ns(ns, group)
            for chunk in sorted(keys, reverse=True):
                if min(client.lookup(gns, keys[chunk]) for client in self._clients) < bs:
                    return False
        return True

    @_scheduler_hook(lambda: (0, False), _no_hit)
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        prompt = list(request.prompt_token_ids or [])
        bs = self._block_size
        chunks = self._lookup_chunks(prompt)
        limit = min(chunks * bs, len(prompt) - 1)  # Never the last prompt token.
        self._requests[request.request_id] = request
        self._hits[request.request_id] = (num_computed_tokens, num_computed_tokens)
        if limit <= num_computed_tokens:
            # vLLM has every chunk kvtier could give; kvtier got them when they were computed.
            return 0, False
        if not self._controls_of(request)["load"]:
            return 0, False
        ns = self._ns_of(request)
        if ns is None:
            return 0, False
        tokens = chunk_tokens(prompt, chunks, bs)
        hit = limit
        for group in self._groups:  # Every chunk of each group with pages of all tokens.
            if group.kind != "sliding":
                gns = self._group_ns(ns, group)
                hit = min([hit] + [client.lookup(gns, tokens) // bs * bs
                                   for client in self._clients])
        # A sliding-window group needs the window before the hit's first uncomputed token; a
        # window is stored at the end of a prompt (the prompt's last token, and its last chunk
        # boundary), so the hit or its chunk boundary is where one is found.
        for candidate in dict.fromkeys((hit, hit // bs * bs)):
            if candidate <= num_computed_tokens:
                break
            if self._windows_cached(ns, prompt, candidate):
                self._hits[request.request_id] = (num_computed_tokens, candidate)
                return candidate - num_computed_tokens, False
        return 0, False

    def _load_ops(self, request, pages: list, local: int, hit: int) -> list:
        """The loads of a hit of `hit` tokens after `local` tokens vLLM has: per group, its
        chunks kvtier gives (a sliding-window group: the window's chunks, one op each)."""
        bs = self._block_size
        chunks = -(-hit // bs)  # The last one may be loaded in part (its first tokens only).
        first = local // bs
        prompt = list(request.prompt_token_ids or [])
        ns = self._ns_of(request)
        ops = []
        for group in self._groups:
            group_pages = pages[group.index] if group.index < len(pages) else []
            if chunks <= first or len(group_pages) < chunks:
                return []
            gns = self._group_ns(ns, group)
            if group.kind != "sliding":
                ops.append(LoadOp(req_id=request.request_id, ns=gns,
                                  tokens=chunk_tokens(prompt, chunks, bs),
                                  pages=group_pages[:chunks], first_chunk=first, chunks=chunks,
                                  hit_tokens=hit, group=group.index))
                continue
            start = max(first, window_start_chunk(group, hit, bs))
            for chunk, key in window_chunk_keys(prompt, start, chunks, bs).items():
                ops.append(LoadOp(req_id=request.request_id, ns=gns, tokens=key,
                                  pages=[group_pages[chunk]], first_chunk=0, chunks=1,
                                  group=group.index, at=chunk))
        return ops

    def _lose_load(self, request, blocks, num_external_tokens, *args, **kwargs):
        """After a failure in update_state_after_alloc: vLLM counts on num_external_tokens being
        loaded, so the load's pages are sent as failed and vLLM recomputes them."""
        req_id = request.request_id
        local, hit = self._hits.get(req_id, (0, 0))
        self._loads.pop(req_id, None)
        if num_external_tokens <= 0 or hit <= local:
            return
        bs = self._block_size
        chunks = -(-hit // bs)
        pages = [list(p) for p in blocks.get_block_ids()] if blocks is not None else []
        pages = pages or self._blocks.get(req_id, [])
        failed = []
        for group in self._groups:
            group_pages = pages[group.index] if group.index < len(pages) else []
            first = local // bs
            if group.kind == "sliding":  # Pages before the window are vLLM's null page.
                first = max(first, window_start_chunk(group, hit, bs))
            failed.append(LoadOp(req_id=req_id, ns=("", []), tokens=[],
                                 pages=group_pages[:chunks], first_chunk=first,
                                 chunks=min(chunks, len(group_pages)), failed=True,
                                 group=group.index))
        self._loads[req_id] = failed

    @_scheduler_hook(lambda: None, _lose_load)
    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        req_id = request.request_id
        self._requests[req_id] = request
        pages = [list(p) for p in blocks.get_block_ids()] if blocks is not None else []
        if any(pages):
            self._blocks[req_id] = pages
        if num_external_tokens <= 0:
            return
        local, hit = self._hits.get(req_id, (0, 0))
        ops = self._load_ops(request, pages, local, hit)
        if ops:
            self._loads[req_id] = ops

    def _failed_loads_meta(self, *args, **kwargs):
        """After a failure in build_connector_meta: every load decided for this step is sent as
        failed (vLLM recomputes its pages), and no save."""
        meta = KvtierConnectorMetadata()
        for ops in self._loads.values():
            for load in ops:
                load.failed = True
                meta.loads.append(load)
        self._loads.clear()
        return meta

    @_scheduler_hook(KvtierConnectorMetadata, _failed_loads_meta)
    def build_connector_meta(self, scheduler_output):
        meta = KvtierConnectorMetadata()
        progress = []  # (req_id, computed before this step)
        for new in scheduler_output.scheduled_new_reqs:
            self._blocks[new.req_id] = [list(p) for p in new.block_ids]
            progress.append((new.req_id, new.num_computed_tokens))
        cached = scheduler_output.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", set()) or set()
        for i, req_id in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                if req_id in resumed or req_id not in self._blocks:
                    self._blocks[req_id] = [list(p) for p in new_ids]
                else:
                    for group_pages, more in zip(self._blocks[req_id], new_ids):
                        group_pages.extend(more)
            progress.append((req_id, cached.num_computed_tokens[i]))
        for req_id, computed in progress:
            try:
                self._step_ops(meta, req_id, computed, scheduler_output)
            except Exception as e:  # noqa: BLE001 - one request's error spoils only its own ops.
                self._scheduler_error("build_connector_meta", e)
                for load in self._loads.pop(req_id, []):
                    load.failed = True
                    meta.loads.append(load)
        return meta

    def _step_ops(self, meta, req_id: str, computed: int, scheduler_output) -> None:
        """Adds req_id's loads (decided in update_state_after_alloc) and, when its prompt's KV is
        complete after this step, its saves."""
        bs = self._block_size
        pages = self._blocks.get(req_id, [])
        for load in self._loads.pop(req_id, []):
            if not load.failed and load.group < len(pages):
                group_pages = pages[load.group]
                load.pages = ([group_pages[load.at]] if load.at >= 0
                              else group_pages[:load.chunks])
            meta.loads.append(load)
        request = self._requests.get(req_id)
        if request is None or req_id in self._saved:
            return
        prompt = request.prompt_token_ids or []
        scheduled = scheduler_output.num_scheduled_tokens.get(req_id, 0)
        if computed + scheduled < len(prompt):
            return  # The prompt's KV is not complete after this step.
        self._saved.add(req_id)
        controls = self._controls_of(request)
        if not controls["save"]:
            return  # The request asked not to be stored (or its controls did not parse).
        ns = self._ns_of(request)
        if ns is None:
            return  # Not cached (no cache_salt under a tenant secret).
        # Whole chunks, and with partial_chunks the partial last one (of 2 tokens or more: one
        # token's chunk would never be loaded, _lookup_chunks).
        tail = len(prompt) % bs if self._partial and len(prompt) % bs > 1 else 0
        chunks = len(prompt) // bs + int(tail > 0)
        local, hit = self._hits.get(req_id, (0, 0))
        # Chunks kvtier gave (the last one maybe in part: kvtier has it whole), or vLLM had
        # (kvtier stored them when they were computed), are not copied again: only the chunks
        # after them are gathered and stored.
        first = max(local // bs, -(-hit // bs) if hit > local else 0)
        if chunks <= first or any(len(p) < chunks for p in pages) or len(pages) < len(
                self._groups):
            return  # Nothing new to keep.
        for group in self._groups:
            save = dict(priority=controls["priority"], ttl_ms=controls["ttl_ms"],
                        group=group.index)
            gns = self._group_ns(ns, group)
            if group.kind != "sliding":
                events = None
                if self._kv_events is not None:  # The whole chunks: vLLM hashes no partial one.
                    events = _block_event_info(
                        request, first, len(prompt) // bs, bs, group.index,
                        getattr(self._kv_cache_config, "hash_block_size", None) or bs)
                meta.saves.append(SaveOp(req_id=req_id, ns=gns,
                                         tokens=chunk_tokens(prompt, chunks, bs),
                                         pages=pages[group.index][:chunks], chunks=chunks,
                                         first_chunk=first, tail_tokens=tail, events=events,
                                         **save))
                continue
            # The windows of the hits this prompt can serve: before its last token, and before
            # its last chunk boundary; never a chunk vLLM freed before this step.
            end_hit = min(len(prompt) // bs * bs, len(prompt) - 1)
            start = max(first, window_start_chunk(group, end_hit, bs),
                        window_start_chunk(group, computed, bs))
            for chunk, key in window_chunk_keys(prompt, start, chunks, bs).items():
                meta.saves.append(SaveOp(req_id=req_id, ns=gns, tokens=key,
                                         pages=[pages[group.index][chunk]], chunks=1,
                                         tail_tokens=tail if chunk == chunks - 1 else 0,
                                         at=chunk, **save))

    def _forget(self, request, *args, **kwargs):
        req_id = request.request_id
        for table in (self._requests, self._hits, self._loads, self._blocks, self._ns,
                      self._controls):
            table.pop(req_id, None)
        self._saved.discard(req_id)

    @_scheduler_hook(lambda: (False, None), _forget)
    def request_finished(self, request, block_ids):
        self._forget(request)
        # Saves copy their pages out during the step that computed them: nothing to hold.
        return False, None

    @_scheduler_hook(lambda: (False, None), _forget)
    def request_finished_all_groups(self, request, block_ids):
        """vLLM's hybrid KV cache manager calls this instead of request_finished."""
        return self.request_finished(request, block_ids)

    @_scheduler_hook(lambda: None)
    def update_connector_output(self, connector_output):
        """Collects the workers' KV events of a step (KV events for routers, above)."""
        events = getattr(connector_output, "kv_cache_events", None)
        if self._event_gather is None or not isinstance(events, KvtierKVEvents):
            return
        dropped = self._event_gather.dropped
        self._event_gather.add(events.get_all_events())
        if self._event_gather.dropped != dropped:
            self._count_sched(kv_events_dropped=self._event_gather.dropped - dropped)

    @_scheduler_hook(lambda: ())
    def take_events(self):
        """The KV events every rank has reported, for vLLM to publish with its own."""
        if self._event_gather is None:
            return ()
        events = self._event_gather.take()
        if events:
            self._count_sched(kv_events_published=len(events))
        return events

    # ------------------------------------------------------------------ worker side

    @staticmethod
    def _zero_counters() -> dict:
        return {"loads": 0, "load_failures": 0, "loaded_tokens": 0, "loaded_bytes": 0,
                "load_stall_s": 0.0, "saves": 0, "save_failures": 0, "saved_chunks": 0,
                "gathered_bytes": 0, "stored_chunks": 0, "stored_bytes": 0, "lookups": 0,
                "lookup_hit_tokens": 0, "lookup_rejects": 0, "service_errors": 0,
                "kv_events_stored": 0, "kv_events_removed": 0, "kv_events_errors": 0,
                "kv_events_untracked": 0, "kv_events_dropped": 0}

    def _count(self, **deltas):
        with self._stats_lock:
            for k, v in deltas.items():
                self._counters[k] += v
                self._interval[k] += v

    def _namespace(self, ns: tuple):
        key = (ns[0], tuple(ns[1]))
        value = self._namespaces.get(key)
        if value is None:
            extra = list(ns[1])
            if self._server_path is not None:  # Each rank's shard is its own on the service.
                extra.append(_rank_key(self._rank, self._tp_size))
            value = self._engine.make_namespace(salt=ns[0], extra_keys=extra)
            if len(self._namespaces) > 4096:
                self._namespaces.clear()
            self._namespaces[key] = value
        return value

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        names = list(kv_caches)

        def order(item):
            m = _LAYER_INDEX.search(item[1])
            return (int(m.group(1)) if m else item[0], item[0])

        names = [n for _, n in sorted(enumerate(names), key=order)]
        members = self._group_members(names)
        first = kv_caches[members[0][0]]
        backend, geometry, latent = self._paged_backend(first)
        layout = dict(layers=len(members[0]), dtype=_DTYPES[first.dtype],
                      block_tokens=self._block_size, **geometry)
        from vllm.distributed import get_tensor_model_parallel_rank
        rank = get_tensor_model_parallel_rank() if self._tp_size > 1 else 0
        self._rank = rank
        if self._server_path is not None:
            # Given the layout, the connection starts before the service does (its calls fail
            # until then), and a service of another layout is refused (logged).
            self._engine = kvtier.connect(self._server_path, layout=layout,
                                          name=f"vllm:{self._engine_id}:tp{rank}",
                                          **self._server_settings)
        else:
            self._engine = self._open_engine(layout, rank)
        self._register_paged_caches(kv_caches, members, backend)
        cache = self._caches[0]
        isa = self._choose_slot_zeroer(first, latent, rank)
        self._warm_staging(len(members[0]))
        logger.info("kvtier: %d layers, %s layout (CPU attention ISA %s), %d pages of %d tokens; "
                    "%s; rank %d of %d; prompts' partial last chunks %s; KV cache groups: %s",
                    len(self._layer_index), cache.layout, isa or "unknown", cache.pages,
                    cache.page_tokens, self._engine.layout, rank, self._tp_size,
                    "cached" if self._partial and self._zero_slots is not None else
                    "not cached", "; ".join(g.describe() for g in self._groups))
        if self._server_path is not None:
            logger.info("kvtier: on the kvtier service at %s (connected: %s)", self._server_path,
                        self._engine.connected)
            return  # The service answers the scheduler's lookups and owns the flushes.
        self._server = _LookupServer(_socket_path(self._config, self._engine_id, rank),
                                     self._serve_lookup,
                                     on_reject=lambda kind: self._count(lookup_rejects=1))
        self._flush_on_signals()

    def _paged_backend(self, first) -> tuple:
        """The paged cache backend of vLLM's KV cache tensors (like `first`), its geometry (the
        layout's keyword arguments besides layers, dtype and block_tokens) and the MLA latent
        layout (None when the model's attention is not MLA). Refuses GPU pages and dtypes kvtier
        does not store."""
        if first.device.type != "cpu":
            raise RuntimeError(
                "KvtierConnector: this connector moves KV between kvtier and host-memory pages; "
                f"the KV cache is on {first.device} (GPU pages need kvtier's CUDA gather/scatter, "
                "not wired into the connector yet)")
        if first.dtype not in _DTYPES:
            raise RuntimeError(f"KvtierConnector: KV cache dtype {first.dtype} is not supported "
                               "(f16, bf16, f32)")
        spec = self._kv_cache_config.kv_cache_groups[0].kv_cache_spec \
            if self._kv_cache_config is not None else None
        latent = mla_latent_layout(spec, first)
        if latent is not None:  # MLA: one latent plane per block (docs/integration.md).
            return "vllm_mla", latent, latent
        kv_heads = getattr(spec, "num_kv_heads", None) or first.shape[1]
        head_dim = getattr(spec, "head_size", None) or first.shape[-1] // 2
        # Canonical blocks (K transposed back to [token][dim]) for a lossy codec over "vec"
        # pages; otherwise the pages are moved byte for byte.
        backend = "vllm_cpu_vec" if self._canonical else "vllm_cpu"
        return backend, dict(kv_heads=int(kv_heads), head_dim=int(head_dim)), None

    def _register_paged_caches(self, kv_caches: dict, members: list, backend: str) -> None:
        """One paged cache of the engine per KV cache group, over its layers' tensors; and the
        maps from a layer's name to its group and its index in the group."""
        for group, group_names in enumerate(members):
            layers = []
            for i, name in enumerate(group_names):
                t = kv_caches[name]
                storage = t.untyped_storage()
                end = storage.data_ptr() + storage.nbytes()
                layers.append((t, t.data_ptr(), end - t.data_ptr(), list(t.shape),
                               list(t.stride()), t.element_size()))
                self._layer_index[name] = i
                self._layer_group[name] = group
            # A group's tensors may share their memory with another group's (vLLM lays the
            # groups over one allocation); a page id belongs to one group at a time.
            self._caches.append(self._engine.paged_cache(backend, layers))
        self._kv_by_name = {name: kv_caches[name] for name in self._layer_index}

    def _choose_slot_zeroer(self, first, latent, rank: int):
        """Sets _zero_slots; returns the ISA the log line names (None: unknown).

        A partial last chunk is stored with zeros after its tokens, written into the page by
        vLLM's own cache writer: kvtier knows vLLM's CPU pages byte for byte, not token by
        token (the K layout depends on the ISA). Without it, partial chunks are not stored."""
        isa = self._page_layout  # The ISA the keys carry (cpu_page_layout, in __init__).
        self._zero_slots = _cpu_slot_zeroer(isa, first.dtype) if isa is not None else None
        if latent is not None:  # Plain latent rows: the same in every ISA.
            isa, self._zero_slots = "any: MLA latent rows", _latent_slot_zeroer
        if self._zero_slots is None and self._partial and rank == 0:
            logger.warning("kvtier: vLLM's CPU attention ISA is unknown here: a prompt's partial "
                           "last chunk is not stored (partial_chunks has no effect)")
        return isa

    def _warm_staging(self, layers: int) -> None:
        """A staging buffer for a whole context's load, faulted in now: the first hit after a
        start would otherwise spend tens of milliseconds on page faults before its first layer.
        (A sliding-window group loads one chunk at a time: its staging is one chunk's.)"""
        max_chunks = self._vllm_config.model_config.max_model_len // self._block_size
        for group, paged in zip(self._groups, self._caches):
            chunks = 1 if group.kind == "sliding" else max_chunks
            warm = min(int(self._config.get("warm_staging_bytes",
                                            chunks * layers * self._engine.block_bytes)),
                       1 << 30)
            if warm > 0:
                paged.warm_staging(warm)

    def _group_members(self, names: list) -> list:
        """Per KV cache group, its layers' names in the model's order; every group must have as
        many as the others (one kvtier layout: a chunk is one page of each of a group's layers).
        With one group, every layer vLLM registered."""
        if len(self._groups) == 1:
            return [names]
        members = [[n for n in names if n in set(g.layers)] for g in self._groups]
        counts = [len(m) for m in members]
        if len(set(counts)) != 1 or not counts[0]:
            raise RuntimeError("KvtierConnector: the KV cache groups have different layer counts ("
                               + ", ".join(f"group {i}: {c}" for i, c in enumerate(counts))
                               + "); kvtier caches groups of equal size only")
        return members

    def _open_engine(self, layout: dict, rank: int):
        c = self._config
        dirs = c.get("ssd_dirs") or []
        if isinstance(dirs, str):
            dirs = [dirs]
        if self._tp_size > 1:
            dirs = [os.path.join(d, f"tp{rank}") for d in dirs]
        kwargs = dict(layout=layout, host_bytes=int(c.get("host_bytes", 2 << 30)),
                      ssd_dirs=dirs, ssd_bytes=int(c.get("ssd_bytes", 0)),
                      ssd_segment_bytes=int(c.get("ssd_segment_bytes", 0)),
                      write_policy=c.get("write_policy", "back"),
                      ssd_codec=c.get("codec", "identity"),
                      ssd_codec_level=int(c.get("codec_level", 0)),
                      ssd_sync=c.get("ssd_sync", "per_batch"),
                      worker_threads=int(c.get("worker_threads", 0)),
                      thread_cpus=str(c.get("thread_cpus", "all")),
                      model_name=f"{self._model_name}|tp{rank}/{self._tp_size}",
                      ssd_key_file=c.get("ssd_key_file", ""), ssd_key_env=c.get("ssd_key_env", ""))
        for key in ("writeback_age_ms_max", "background_nice"):
            if key in c:
                kwargs[key] = int(c[key])
        if "background_priority" in c:
            kwargs["background_priority"] = str(c["background_priority"])
        if c.get("remote_endpoints"):
            password = ""
            if c.get("remote_password_env"):
                password = os.environ.get(c["remote_password_env"], "")
            kwargs.update(remote_endpoints=list(c["remote_endpoints"]),
                          remote_cluster=bool(c.get("remote_cluster", False)),
                          remote_write_policy=c.get("remote_write_policy", "through"),
                          remote_connections=int(c.get("remote_connections", 1)),
                          remote_user=c.get("remote_user", ""), remote_password=password,
                          remote_key_file=c.get("remote_key_file", ""),
                          remote_key_env=c.get("remote_key_env", ""),
                          remote_insecure_plaintext=bool(c.get("remote_insecure_plaintext",
                                                               False)))
        if c.get("fs_dir"):
            kwargs.update(fs_dir=str(c["fs_dir"]),
                          remote_write_policy=c.get("remote_write_policy", "through"),
                          remote_key_file=c.get("remote_key_file", ""),
                          remote_key_env=c.get("remote_key_env", ""),
                          remote_insecure_plaintext=bool(c.get("remote_insecure_plaintext",
                                                               False)))
            for key in ("fs_bytes_max", "fs_max_age_s", "fs_sweep_interval_ms"):
                if key in c:
                    kwargs[key] = int(c[key])
            for key in ("fs_fsync", "fs_group_shared"):
                if key in c:
                    kwargs[key] = bool(c[key])
        return kvtier.Engine(**kwargs)

    # ------------------------------------------------------------------ stopping

    def _flush_on_signals(self):
        """Flushes kvtier when the worker process gets SIGTERM or SIGINT, then runs the handler
        that was there before (vLLM's worker raises SystemExit, and its shutdown force-kills
        workers that have not exited within a few seconds, so the connector's shutdown() may
        never run). Python runs the handler on the main thread between bytecodes, never inside a
        kvtier call of that thread; the engine is thread-safe for the lookup thread meanwhile."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous_handlers[signum] = signal.signal(signum, self._on_stop_signal)
            except ValueError:  # Not the main thread: vLLM's own shutdown path remains.
                logger.warning("kvtier: register_kv_caches ran outside the main thread; no "
                               "flush on SIGTERM/SIGINT (chunks reach the SSD within "
                               "writeback_age_ms_max)")
                return

    def _on_stop_signal(self, signum, frame):
        if not self._signal_flushed:
            self._signal_flushed = True
            self._flush_before_exit(signal.Signals(signum).name)
        previous = self._previous_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # What the signal would have done without us.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _ssd_blocks(self) -> int:
        for t in self._engine.stats().tiers:
            if str(t.kind).split(".")[-1].lower() == "ssd":
                return t.blocks
        return 0

    def _flush_before_exit(self, why: str):
        engine = self._engine
        if engine is None or engine.closed:
            return
        start = time.perf_counter()
        try:
            before = self._ssd_blocks()
            engine.flush()
            chunks = max(self._ssd_blocks() - before, 0) // max(engine.layers, 1)
        except kvtier.Error as e:
            logger.warning("kvtier: %s: flush failed after %.1f ms: %s", why,
                           (time.perf_counter() - start) * 1e3, e)
            return
        logger.info("kvtier: %s: flushed %d chunks to the SSD in %.1f ms", why, chunks,
                    (time.perf_counter() - start) * 1e3)

    def _serve_lookup(self, request: dict) -> int:
        tokens = [int(t) for t in request["tokens"]]
        ns = self._namespace((str(request["salt"]), [str(x) for x in request["extra"]]))
        matched = self._engine.lookup(ns, tokens).matched_tokens
        self._count(lookups=1, lookup_hit_tokens=matched)
        return matched

    def start_load_kv(self, forward_context, **kwargs):
        self._finish_loads()
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        loaded = set()  # Requests counted in "loads" (one per request, whatever its groups)
        for op in meta.loads:
            if op.failed:  # The scheduler lost it: vLLM recomputes these pages.
                self._failed_pages.update(op.pages[op.first_chunk:op.chunks])
                self._count(load_failures=1)
                continue
            try:
                load = self._engine.load_pages(self._namespace(op.ns), op.tokens,
                                               self._caches[op.group], op.pages, op.first_chunk,
                                               op.chunks)
            except kvtier.Error as e:
                logger.warning("kvtier: load of request %s refused (recomputed): %s",
                               op.req_id, e)
                self._failed_pages.update(op.pages[op.first_chunk:])
                self._count(load_failures=1, service_errors=self._service_error(e))
                continue
            self._active_loads.append((op, load))
            self._count(loads=int(op.req_id not in loaded))
            loaded.add(op.req_id)

    def wait_for_layer_load(self, layer_name):
        if not self._active_loads:
            return
        layer = self._layer_index.get(layer_name)
        if layer is None:
            return
        group = self._layer_group[layer_name]
        start = time.perf_counter()
        for op, load in self._active_loads:
            if op.group != group:
                continue
            try:
                load.wait_layer(layer)
            except kvtier.Error as e:
                if not set(op.pages[op.first_chunk:]) <= self._failed_pages:
                    logger.warning("kvtier: layer %d of request %s failed to load "
                                   "(recomputed): %s", layer, op.req_id, e)
                    self._count(load_failures=1, service_errors=self._service_error(e))
                self._failed_pages.update(op.pages[op.first_chunk:])
        self._count(load_stall_s=time.perf_counter() - start)

    def _finish_loads(self):
        for op, load in self._active_loads:
            try:
                load.wait()
                if op.at < 0:  # A window chunk's tokens are counted by its prefix's load.
                    self._count(loaded_tokens=op.hit_tokens - op.first_chunk * self._block_size)
            except kvtier.Error:
                self._failed_pages.update(op.pages[op.first_chunk:])
            self._count(loaded_bytes=load.bytes_scattered)
            load.close()
        self._active_loads = []

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        if not meta.saves:
            return
        layer = self._layer_index.get(layer_name)
        if layer is None:
            return
        group = self._layer_group[layer_name]
        if self._saves_meta is not meta:  # The step's first layer: make its saves once.
            self._saves_meta = meta
            for op in meta.saves:
                if op.tail_tokens and self._zero_slots is None:  # Whole chunks only.
                    op.chunks, op.tail_tokens = op.chunks - 1, 0
                    op.tokens = op.tokens[:op.chunks * self._block_size]
                    if op.chunks <= op.first_chunk:
                        continue
                try:
                    # The page's slots after a partial chunk's tokens are zeroed in the page
                    # below, layer by layer, before each gather.
                    self._active_saves.append((op, self._engine.save_pages(
                        self._caches[op.group], op.pages, op.chunks, op.first_chunk)))
                except kvtier.Error as e:
                    logger.warning("kvtier: save of request %s refused: %s", op.req_id, e)
                    self._count(save_failures=1)
        for op, save in self._active_saves:
            if op.group != group:
                continue
            if op.tail_tokens:
                # Slots after the prompt hold stale KV of the page's earlier user (maybe another
                # tenant); vLLM writes them only in later steps, after this gather.
                self._zero_slots(self._kv_by_name[layer_name], op.pages[op.chunks - 1],
                                 op.tail_tokens)
            save.gather_layer(layer)

    def wait_for_save(self):
        self._finish_loads()
        for op, save in self._active_saves:
            try:
                save.commit(self._namespace(op.ns), op.tokens,
                            priority=_PRIORITY_OF[op.priority], ttl_ms=op.ttl_ms)
                with self._saves_lock:
                    self._pending_saves.append((op, save))
                self._count(saves=1, saved_chunks=op.chunks - op.first_chunk,
                            gathered_bytes=save.bytes_gathered)
            except kvtier.Error as e:  # Busy (pinned, or dirty blocks being written back): a miss.
                # Also the service being down: the store is skipped, never retried.
                logger.warning("kvtier: store of request %s skipped: %s", op.req_id, e)
                self._count(save_failures=1, service_errors=self._service_error(e))
                save.close()
        self._active_saves = []
        self._saves_meta = None
        with self._saves_lock:
            self._reap_saves(block=False)
        self._maybe_write_stats()
        self._start_reaper()

    def _start_reaper(self):
        """Stores complete after the step that committed them (on the node service, after a
        round trip): a thread reaps them every 50 ms while any is in flight, so their counters
        and the stats file do not wait for a next step that may never come (the last request of
        a burst)."""
        with self._saves_lock:
            if self._reaper is not None or not self._reaper_busy() or self._closing:
                return
            self._reaper = threading.Thread(target=self._reap_in_background,
                                            name="kvtier-reaper", daemon=True)
            self._reaper.start()

    def _reaper_busy(self) -> bool:
        """Whether the reaper thread has work: stores in flight, or KV events to track."""
        return bool(self._pending_saves) or (self._event_tracker is not None
                                             and self._event_tracker.busy())

    def _reap_in_background(self):
        while True:
            time.sleep(0.05)
            with self._saves_lock:
                self._reap_saves(block=False)
            self._kv_events_tick()
            with self._saves_lock:
                done = not self._reaper_busy() or self._closing
                if done:
                    self._reaper = None
            self._maybe_write_stats()
            if done:
                return

    def _kv_events_tick(self):
        """Looks up the chunks of completed stores and, at the configured rate, the chunks
        reported before (KV events for routers). Never raises: errors are counted and logged."""
        tracker = self._event_tracker
        if tracker is None:
            return
        try:
            tracker.tick(self._chunk_media, time.monotonic())
        except Exception as e:  # noqa: BLE001 - the reaper thread must go on.
            tracker.error(e)
        self._count(**tracker.take_counters())

    def _chunk_media(self, ns: tuple, tokens: list) -> list:
        """The medium ("kvtier:<tier>") of each chunk of `tokens` kvtier holds, from the first
        on. On the node service, a lookup while it is not reachable is a miss: it raises
        instead, so that the chunks are not reported removed."""
        service = self._server_path is not None
        if service and not self._engine.connected:
            raise ConnectionError("the kvtier service is not reachable")
        result = self._engine.lookup(self._namespace(ns), tokens)
        if service and not self._engine.connected:
            raise ConnectionError("the kvtier service went away during a lookup")
        return [KV_EVENTS_MEDIUM_PREFIX + str(t).split(".")[-1].lower()
                for t in result.chunk_tiers]

    def _reap_saves(self, block: bool):
        still = []
        for op, save in self._pending_saves:
            if not block and not save.done():
                still.append((op, save))
                continue
            try:
                save.wait()
                self._count(stored_chunks=save.chunks_stored,
                            stored_bytes=save.chunks_stored * self._engine.layers *
                            self._engine.block_bytes)
                if self._event_tracker is not None:
                    self._event_tracker.stored(op)
            except kvtier.Error as e:
                logger.warning("kvtier: store of request %s failed: %s", op.req_id, e)
                self._count(save_failures=1, service_errors=self._service_error(e))
            save.close()
        self._pending_saves = still

    def _service_error(self, error) -> int:
        """1 when `error` is the node service's absence (down, dead, slow), else 0."""
        if self._server_path is None:
            return 0
        return int(isinstance(error, (kvtier.UnavailableError, kvtier.TimedOutError)))

    def get_finished(self, finished_req_ids):
        return None, None

    def get_kv_connector_kv_cache_events(self):
        """The KV events this worker found since the last step (KV events for routers)."""
        if self._role != KVConnectorRole.WORKER or self._event_tracker is None:
            return None
        events = self._event_tracker.take()
        return KvtierKVEvents(self._rank, events) if events else None

    def get_block_ids_with_load_errors(self) -> set[int]:
        failed, self._failed_pages = self._failed_pages, set()
        return failed

    def stats(self) -> dict:
        """The worker's counters and the kvtier engine's per-tier statistics."""
        with self._stats_lock:
            out = dict(self._counters)
        service = self._server_path is not None
        if service and self._engine is not None and not self._engine.closed:
            out["service"] = self._engine.connection_state()
        # A service that is down is not asked (each step would wait for it).
        if (self._engine is not None and not self._engine.closed
                and (not service or out["service"]["connected"])):
            out.update(engine_stats_dict(self._engine.stats()))
        return out

    def _maybe_write_stats(self, force: bool = False):
        """Writes stats_file when a counter changed since the last write (or when forced)."""
        path = self._config.get("stats_file")
        if not path:
            return
        if self._tp_size > 1:  # Each rank its own file: the ranks' counters are their own.
            path = f"{path}.tp{self._rank}"
        # One writer at a time (the step loop and the reaper): the last file written holds the
        # latest counters.
        with self._stats_write_lock:
            with self._stats_lock:
                snapshot = tuple(self._counters.values())
            if not force and snapshot == self._stats_written:
                return
            self._stats_written = snapshot
            # An O_EXCL|O_NOFOLLOW temporary with a random name, renamed over the file. A
            # stats_file that is a FIFO, device, directory or link is refused: logged once, never
            # raised into vLLM's step loop.
            try:
                replace_regular_file(path, json.dumps(self.stats(), indent=1, sort_keys=True))
            except (OSError, ValueError) as e:
                if getattr(self, "_stats_file_error", None) != str(e):
                    self._stats_file_error = str(e)
                    logger.warning("kvtier: stats_file not written: %s", e)

    def get_kv_connector_stats(self):
        if self._role == KVConnectorRole.SCHEDULER:
            with self._sched_lock:
                data, self._sched_interval = self._sched_interval, self._zero_sched_counters()
            return KvtierConnectorStats(data=data) if any(data.values()) else None
        if self._role != KVConnectorRole.WORKER:
            return None
        with self._stats_lock:
            data, self._interval = self._interval, self._zero_counters()
        if not any(data.values()):
            return None
        return KvtierConnectorStats(data=data)

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return KvtierConnectorStats(data=dict(data or {}))

    def shutdown(self):
        if self._role == KVConnectorRole.SCHEDULER and self._server_path is not None:
            try:
                self._service.close()
            except Exception as e:  # noqa: BLE001 - closing never fails vLLM's shutdown.
                logger.warning("kvtier: closing the service connection: %s", e)
            return
        if self._role != KVConnectorRole.WORKER or self._engine is None:
            return
        self._finish_loads()
        with self._saves_lock:
            self._closing = True
            reaper = self._reaper
        if reaper is not None:
            reaper.join()
        with self._saves_lock:
            self._reap_saves(block=True)
        if self._server is not None:
            self._server.close()
        if self._server_path is None:  # The service's dirty chunks are the service's.
            self._flush_before_exit("shutdown")
        self._maybe_write_stats(force=True)
        self._engine.close()
        for signum, previous in self._previous_handlers.items():  # The engine is gone.
            try:
                if signal.getsignal(signum) == self._on_stop_signal and previous is not None:
                    signal.signal(signum, previous)
            except ValueError:  # Not the main thread: the handlers stay, and do nothing now.
                pass
