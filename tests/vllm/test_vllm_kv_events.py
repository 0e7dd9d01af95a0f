"""KV events for routers: KvtierConnector reports the chunks kvtier holds through vLLM's KV events.

Goal: a KV-aware router that indexes vLLM's KV cache events learns which prefixes this instance's
kvtier holds, under the same block hashes as vLLM's own events: a BlockStored with medium
"kvtier:host" for every whole chunk of a stored prompt once its store completed, with vLLM's own
block hash, parent and token ids of each block; a BlockRemoved for those chunks once kvtier no
longer holds them (evicted from a small host tier, no SSD: every chunk but the first, which kvtier
keeps at high priority as the sequence's attention sink, and the chunks still announced are
always a leading run); a chunk that moves tier is removed
from its old medium and stored in its new one; with several tensor-parallel ranks an event goes
out once every rank reported it (checked with TP=2 on vLLM's CPU build too); and the connector
changes no generated token.

Method:
  * Fast checks without a vLLM engine: the scheduler's hooks on test_connector_safety.py's
    stand-in vllm_config (a save carries the request's block hashes, converted as vLLM converts
    them, and its token ids; the events of two ranks are matched across steps), the worker's
    event tracker driven with a stand-in lookup and an explicit clock (store, move to the SSD,
    eviction, the tracking cap, the recheck rate, a failing lookup), and the worker's hooks on
    `kvtier serve` (KVTIER_SERVE_BIN): the service's tier, and no removal while it is down.
  * End to end: a real vLLM (the offline API on the CPU backend, in a subprocess driven line by
    line through this file's driver mode) with vLLM's prefix cache and KV events on, published
    by vLLM's ZMQ publisher on an ipc:// path in tmp_path, and the connector on a 2 MiB host
    tier (16 chunks of tests/vllm/make_model.py's model) without SSD. The test's ZMQ SUB socket
    connects before vLLM starts and decodes vLLM's KVEventBatch (msgspec msgpack); probe
    requests run until the first batch arrives (ZMQ's slow joiner), and each later wait sends
    requests (new steps carry the events) until what it waits for has arrived: the timeouts only
    bound a failure. A prompt's greedy tokens are compared with tests/vllm/run_vllm.py's without
    the connector.

Requires vLLM (scripts/setup_vllm_venv.sh); a missing one is a skip, which
KVTIER_REQUIRE_RESOURCES=1 (CI) turns into a failure.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

# pytestmark: skipped (a failure in CI) without vLLM, as every test here.
from test_connector_safety import make_config, pytestmark  # noqa: F401
from test_vllm_e2e import MIN_MARGIN

HERE = Path(__file__).resolve().parent
BLOCK = 32
MAX_TOKENS = 8
HOST_BYTES = 2 << 20            # 16 chunks: 4 layers x 2 (K, V) x 4 heads x 64 x 32 tokens x 2 B
MARK = "KVEVENTS-DRIVER "       # The driver's replies on stdout (vLLM logs there too)
WAIT_S = 300                    # Bounds a failure only: every wait ends when its events arrived


# ------------------------------------------------------------------ fast checks, no engine

def scheduler(tmp_path, tp=1, **extra):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from kvtier.vllm import KvtierConnector

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    config = make_config(dict(runtime_dir=str(runtime), **extra))
    config.parallel_config.tensor_parallel_size = tp
    return KvtierConnector(config, KVConnectorRole.SCHEDULER, None)


def hashed_request(req_id, tokens, block=16):
    """A stand-in request with vLLM's block hashes of its whole blocks (bytes, as vLLM's)."""
    import hashlib

    hashes, parent = [], b""
    for b in range(len(tokens) // block):
        parent = hashlib.sha256(parent + bytes(str(tokens[b * block:(b + 1) * block]),
                                               "ascii")).digest()
        hashes.append(parent)
    return SimpleNamespace(request_id=req_id, prompt_token_ids=list(tokens),
                           all_token_ids=list(tokens), block_hashes=hashes, cache_salt=None,
                           lora_request=None, mm_features=[], prompt_embeds=None)


def test_events_follow_vllms_kv_events_config(tmp_path):
    from kvtier.vllm import kv_events_settings

    on = SimpleNamespace(kv_events_config=SimpleNamespace(enable_kv_cache_events=True))
    off = SimpleNamespace(kv_events_config=SimpleNamespace(enable_kv_cache_events=False))
    assert kv_events_settings(on, {}) == {"interval_ms": 1000, "max_prompts": 4096,
                                          "prompts_per_tick": 128}
    assert kv_events_settings(off, {}) is None
    assert kv_events_settings(SimpleNamespace(), {}) is None
    assert kv_events_settings(off, {"kv_events": True}) is not None
    assert kv_events_settings(on, {"kv_events": False}) is None
    for bad in ({"kv_events": "yes"}, {"kv_events_interval_ms": 0},
                {"kv_events_max_prompts": True}):
        with pytest.raises(RuntimeError):
            kv_events_settings(on, bad)
    # Off (the stand-in has no kv_events_config): no event info in saves, no events taken.
    conn = scheduler(tmp_path)
    req = hashed_request("r0", list(range(3, 103)))
    conn.update_state_after_alloc(req, None, 0)
    meta = conn.build_connector_meta(save_step(req))
    assert meta.saves and meta.saves[0].events is None
    assert list(conn.take_events()) == []


def save_step(req):
    new = SimpleNamespace(req_id=req.request_id, block_ids=([1, 2, 3, 4, 5, 6, 7],),
                          num_computed_tokens=0)
    cached = SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[],
                             resumed_req_ids=set())
    return SimpleNamespace(scheduled_new_reqs=[new], scheduled_cached_reqs=cached,
                           num_scheduled_tokens={req.request_id: len(req.prompt_token_ids)})


def test_a_save_carries_vllms_block_hashes_of_its_whole_chunks(tmp_path):
    from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash

    conn = scheduler(tmp_path, kv_events=True)
    tokens = list(range(3, 103))  # 6 whole chunks of 16 and a partial one
    req = hashed_request("r1", tokens)
    conn.update_state_after_alloc(req, None, 0)
    meta = conn.build_connector_meta(save_step(req))
    assert len(meta.saves) == 1 and conn.scheduler_stats()["scheduler_errors"] == 0
    info = meta.saves[0].events
    assert info["first"] == 0 and info["parent"] is None and info["group"] == 0
    assert info["hashes"] == [maybe_convert_block_hash(h) for h in req.block_hashes]
    assert len(info["hashes"]) == 6, "the partial last chunk has no vLLM hash"
    assert info["lora_id"] is None and info["lora_name"] is None


def rank_events(rank, *events):
    from kvtier.vllm import KvtierKVEvents

    return SimpleNamespace(kv_cache_events=KvtierKVEvents(rank, list(events)))


def test_several_ranks_publish_an_event_once_every_rank_reported_it(tmp_path):
    from vllm.distributed.kv_events import BlockRemoved

    conn = scheduler(tmp_path, tp=2, kv_events=True)
    a = BlockRemoved(block_hashes=[1], medium="kvtier:host")
    b = BlockRemoved(block_hashes=[2], medium="kvtier:host")
    conn.update_connector_output(rank_events(0, a, b))
    assert list(conn.take_events()) == [], "published before rank 1 reported it"
    conn.update_connector_output(rank_events(0, a))  # Rank 0 again: still one rank.
    assert list(conn.take_events()) == []
    conn.update_connector_output(rank_events(1, a))  # A later step: both ranks have it now.
    assert list(conn.take_events()) == [a]
    conn.update_connector_output(rank_events(1, b))
    assert list(conn.take_events()) == [b]
    assert conn.scheduler_stats()["kv_events_published"] == 2
    assert conn.scheduler_stats()["scheduler_errors"] == 0


class Tiers:
    """A stand-in for the worker's lookup: per key tokens, the medium of each chunk held."""

    def __init__(self):
        self.media = {}
        self.calls = 0
        self.fail = False

    def __call__(self, ns, tokens):
        self.calls += 1
        if self.fail:
            raise RuntimeError("lookup failed")
        out = []
        for c in range(len(tokens) // 16):
            medium = self.media.get(tuple(tokens[:(c + 1) * 16]))
            if medium is None:
                break
            out.append(medium)
        return out

    def hold(self, tokens, chunks, medium):
        for c in chunks:
            self.media[tuple(tokens[:(c + 1) * 16])] = medium


def tracker(**settings):
    from kvtier.vllm import _KvEventTracker

    return _KvEventTracker(16, dict(dict(interval_ms=1000, max_prompts=8, prompts_per_tick=4),
                                    **settings))


def stored_op(tokens, first=0, name="r"):
    from kvtier.vllm import _block_event_info

    req = hashed_request(name, tokens)
    whole = len(tokens) // 16
    return SimpleNamespace(ns=("", []), tokens=list(tokens) + [0] * (-len(tokens) % 16),
                           events=_block_event_info(req, first, whole, 16, 0, 16))


def by_kind(events):
    return [(type(e).__name__, e.medium, list(e.block_hashes)) for e in events]


def test_tracker_reports_stores_moves_and_removals_at_the_configured_rate():
    tiers, t = Tiers(), tracker()
    tokens = list(range(3, 3 + 4 * 16 + 5))
    op = stored_op(tokens)
    hashes = op.events["hashes"]
    tiers.hold(tokens, range(4), "kvtier:host")
    t.stored(op)
    t.tick(tiers, now=0.0)
    (event,) = t.take()
    assert by_kind([event]) == [("BlockStored", "kvtier:host", hashes)]
    assert event.parent_block_hash is None and event.block_size == 16
    assert list(event.token_ids) == tokens[:64]
    # The chunks after the first two move to the SSD (host evicted): removed, then stored again.
    tiers.hold(tokens, (2, 3), "kvtier:ssd")
    t.tick(tiers, now=0.5)
    assert t.take() == [], "rechecked before kv_events_interval_ms"
    t.tick(tiers, now=1.0)
    events = t.take()
    assert by_kind(events) == [("BlockRemoved", "kvtier:host", hashes[2:]),
                               ("BlockStored", "kvtier:ssd", hashes[2:])]
    assert events[1].parent_block_hash == hashes[1] and list(events[1].token_ids) == tokens[32:64]
    # A failing lookup changes nothing and is counted.
    tiers.fail = True
    t.tick(tiers, now=2.0)
    assert t.take() == [] and t.take_counters()["kv_events_errors"] == 1
    tiers.fail = False
    # The first chunk is gone: no chunk is reachable, every one is removed; then untracked.
    del tiers.media[tuple(tokens[:16])]
    t.tick(tiers, now=3.0)
    assert by_kind(t.take()) == [("BlockRemoved", "kvtier:host", hashes[:2]),
                                 ("BlockRemoved", "kvtier:ssd", hashes[2:])]
    calls = tiers.calls
    t.tick(tiers, now=4.0)
    assert tiers.calls == calls and not t.busy(), "a prompt with no chunk left is still tracked"


def test_tracker_bounds_its_prompts_and_its_lookups_per_tick():
    tiers, t = Tiers(), tracker(max_prompts=3, prompts_per_tick=2)
    prompts = [[p] + list(range(3, 3 + 2 * 16 - 1)) for p in range(5)]
    for p in prompts:
        tiers.hold(p, range(2), "kvtier:host")
        t.stored(stored_op(p))
    t.tick(tiers, now=0.0)   # Two new stores per tick: the rest wait for the next ticks.
    assert tiers.calls == 2 and len(t.take()) == 2
    t.tick(tiers, now=0.01)
    t.tick(tiers, now=0.02)
    assert len(t.take()) == 1
    assert t.take_counters()["kv_events_untracked"] == 2, "the two oldest prompts were dropped"
    calls = tiers.calls
    t.tick(tiers, now=5.0)   # A recheck: at most prompts_per_tick lookups.
    assert tiers.calls - calls == 2
    # A chunk shared by two prompts is reported once.
    t2 = tracker()
    shared = list(range(3, 3 + 2 * 16))
    tiers.hold(shared, range(2), "kvtier:host")
    t2.stored(stored_op(shared, name="a"))
    t2.stored(stored_op(shared, name="b"))
    t2.tick(tiers, now=0.0)
    assert len(t2.take()) == 1


def test_a_worker_on_the_node_service_reports_the_services_tiers(tmp_path):
    """The worker's hooks on `kvtier serve`: a completed store is reported with the service's
    tier; while the service is down nothing is reported removed (a failed lookup is counted)."""
    import numpy as np
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    import kvtier
    from kvtier.vllm import KvtierConnector, KvtierKVEvents
    from test_connector_service import LAYOUT, MODEL_KEY, start_service

    sock = tmp_path / "kvtier.sock"
    proc = start_service(sock)
    try:
        conn = KvtierConnector(make_config({"server": f"unix:{sock}", "kv_events": True,
                                            "server_timeout_ms": 2000}),
                               KVConnectorRole.WORKER, None)
        conn._engine = kvtier.connect(str(sock), layout=LAYOUT)  # What register_kv_caches does
        tokens = list(range(3, 3 + 3 * 16))
        src = np.ones((3, conn._engine.layers) + conn._engine.block_shape,
                      dtype=conn._engine.numpy_dtype)
        conn._engine.store(conn._namespace(("tenant-a", [MODEL_KEY])), tokens, src).wait()
        op = stored_op(tokens)
        op.ns = ("tenant-a", [MODEL_KEY])
        conn._event_tracker.stored(op)
        conn._kv_events_tick()
        events = conn.get_kv_connector_kv_cache_events()
        assert isinstance(events, KvtierKVEvents)
        assert [(rank, type(e).__name__, e.medium, list(e.block_hashes))
                for rank, e in events.get_all_events()] == [
            (0, "BlockStored", "kvtier:host", op.events["hashes"])]
        proc.kill()
        proc.wait(timeout=10)
        conn._event_tracker._next_check = 0.0  # Due now.
        conn._kv_events_tick()
        assert conn.get_kv_connector_kv_cache_events() is None, "a dead service is no removal"
        assert conn.stats()["kv_events_errors"] == 1
        conn._engine.close()
    finally:
        proc.kill()
        proc.wait(timeout=10)


# ------------------------------------------------------------------ end to end

def driver_main():
    """This file's driver mode: a vLLM with KV events on, generating the prompts that arrive on
    stdin (one JSON object a line), answering each on stdout (MARK + JSON)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--connector")
    parser.add_argument("--kv-events", required=True)
    parser.add_argument("--tp", type=int, default=1)
    args = parser.parse_args(sys.argv[2:])
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # One rank: vLLM in this process, as tests/vllm/run_vllm.py runs it (it starts faster); the
    # events still leave through the ZMQ publisher.
    extra = {}
    if args.tp == 1:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        extra["distributed_executor_backend"] = "uni"
    from vllm import LLM, SamplingParams
    from vllm.config import KVEventsConfig

    connector = json.loads(Path(args.connector).read_text()) if args.connector else None
    llm = LLM(model=args.model, dtype="bfloat16", max_model_len=1024, block_size=BLOCK,
              enforce_eager=True, seed=0, enable_prefix_caching=True,
              kv_transfer_config=connector, max_num_batched_tokens=1024,
              tensor_parallel_size=args.tp, kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                                              endpoint=args.kv_events, topic="kvtier-test"),
              **extra)
    print(MARK + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        if ask.get("quit"):
            break
        extra = {"kv_transfer_params": ask["kv_transfer_params"]} \
            if "kv_transfer_params" in ask else None
        result = llm.generate([{"prompt_token_ids": ask["tokens"]}],
                              SamplingParams(temperature=0, max_tokens=ask.get("max_tokens", 4),
                                             extra_args=extra), use_tqdm=False)
        print(MARK + json.dumps({"tokens": list(result[0].outputs[0].token_ids)}), flush=True)
    del llm
    return 0


class Subscriber:
    """vLLM's KV event stream: a ZMQ SUB socket on the publisher's endpoint, decoded in a thread
    into self.events (every event of every batch, in order)."""

    def __init__(self, endpoint):
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch

        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, "kvtier-test")
        self.sub.connect(endpoint)
        self.decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self.events, self.lock, self.stop, self.error = [], threading.Lock(), False, None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stop:
                if not self.sub.poll(100):
                    continue
                _topic, _seq, payload = self.sub.recv_multipart()
                batch = self.decoder.decode(payload)
                with self.lock:
                    self.events.extend(batch.events)
        except Exception as e:  # noqa: BLE001 - reported by snapshot()
            self.error = e

    def snapshot(self):
        assert self.error is None, f"the subscriber failed: {self.error!r}"
        with self.lock:
            return list(self.events)

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.sub.close(0)
        self.ctx.term()


class Driver:
    """The vLLM subprocess of driver_main: generate(tokens) -> its greedy tokens."""

    def __init__(self, tmp, model, connector, endpoint, tp=1, env=None):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--driver", "--model", str(model),
               "--kv-events", endpoint, "--tp", str(tp)]
        if connector is not None:
            cfile = tmp / "connector.json"
            cfile.write_text(json.dumps(connector))
            cmd += ["--connector", str(cfile)]
        self.log = tmp / "driver.log"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1,
                                     env=dict(os.environ, **(env or {})))
        self.replies = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        self._reply()  # ready

    def _read(self):
        with open(self.log, "w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                if line.startswith(MARK):
                    self.replies.put(json.loads(line[len(MARK):]))
        self.replies.put(None)

    def _reply(self):
        try:
            reply = self.replies.get(timeout=WAIT_S)
        except queue.Empty:
            reply = None
        if reply is None:
            tail = self.log.read_text()[-4000:] if self.log.exists() else ""
            pytest.fail(f"the vLLM driver did not answer (exit {self.proc.poll()}); "
                        f"log {self.log}:\n{tail}")
        return reply

    def generate(self, tokens, max_tokens=MAX_TOKENS, **params):
        ask = {"tokens": tokens, "max_tokens": max_tokens}
        if params:
            ask["kv_transfer_params"] = {"kvtier": params}
        self.proc.stdin.write(json.dumps(ask) + "\n")
        self.proc.stdin.flush()
        return self._reply()["tokens"]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def random_prompt(seed, n):
    import random

    rng = random.Random(seed)
    return [rng.randrange(3, 259) for _ in range(n)]


def wait_until(sub, done, drive, what):
    """Sends drive()'s requests (each step carries the events found since the last one) until
    done(events) holds; WAIT_S and a request count bound a failure only."""
    deadline = time.monotonic() + WAIT_S
    for i in range(200):
        result = done(sub.snapshot())
        if result:
            return result
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        drive(i)
    pytest.fail(f"no {what} after 200 requests")


def blocks_of(events, kvtier):
    """{block hash: (parent, token ids)} of the BlockStored events of kvtier (or of vLLM)."""
    out = {}
    for e in events:
        if type(e).__name__ != "BlockStored" or (e.medium or "").startswith("kvtier:") != kvtier:
            continue
        parent = e.parent_block_hash
        for j, h in enumerate(e.block_hashes):
            out[h] = (parent, list(e.token_ids[j * e.block_size:(j + 1) * e.block_size]))
            parent = h
    return out


def announced(events):
    """The block hashes kvtier's events say it holds, after all of `events`."""
    held = set()
    for e in events:
        if not (e.medium or "").startswith("kvtier:"):
            continue
        if type(e).__name__ == "BlockStored":
            held.update((h, e.medium) for h in e.block_hashes)
        elif type(e).__name__ == "BlockRemoved":
            held.difference_update((h, e.medium) for h in e.block_hashes)
    return {h for h, _medium in held}


def chain(blocks, tokens):
    """The hashes of the whole blocks of `tokens` in `blocks` (by parent and token ids)."""
    by_content = {(parent, tuple(ids)): h for h, (parent, ids) in blocks.items()}
    out, parent = [], None
    for b in range(len(tokens) // BLOCK):
        h = by_content.get((parent, tuple(tokens[b * BLOCK:(b + 1) * BLOCK])))
        if h is None:
            break
        out.append(h)
        parent = h
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("kvevents") / "model"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(path)], check=True,
                   capture_output=True)
    return path


def baseline_tokens(tmp, model, prompt_list):
    """Greedy tokens of the prompts without the connector (tests/vllm/run_vllm.py)."""
    pfile, out = tmp / "baseline.prompts.json", tmp / "baseline.out.json"
    pfile.write_text(json.dumps([{"tokens": p} for p in prompt_list]))
    proc = subprocess.run([sys.executable, str(HERE / "run_vllm.py"), "--model", str(model),
                           "--prompts", str(pfile), "--out", str(out), "--max-tokens",
                           str(MAX_TOKENS), "--block-size", str(BLOCK), "--max-model-len",
                           "1024"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(out.read_text())
    # A token check compares KV only where no rounding difference can flip a token.
    low = min(m for margins in result["margins"] for m in margins)
    assert low >= MIN_MARGIN, f"the test model is not decisive: a top-1 lead of {low:.3f}"
    return result["outputs"]


def start_vllm(tmp_path, tmp_path_factory, model, tp=1, env=None):
    """A subscriber, then the driver's vLLM with the connector on a HOST_BYTES host tier and
    events on; probe requests (not stored in kvtier) run until the first batch arrives, so the
    subscription is live. (subscriber, driver)."""
    sockets = tmp_path_factory.mktemp("kvev")  # A short path: Unix socket paths are short
    runtime = sockets / "run"
    runtime.mkdir(mode=0o700)
    connector = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
                 "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                 "kv_connector_extra_config": {"host_bytes": HOST_BYTES, "runtime_dir":
                                               str(runtime), "kv_events_interval_ms": 50,
                                               "stats_file": str(tmp_path / "stats.json")}}
    endpoint = f"ipc://{sockets / 'events.sock'}"
    sub = Subscriber(endpoint)  # Connected before vLLM binds: ZMQ connects when it does.
    try:
        driver = Driver(tmp_path, model, connector, endpoint, tp=tp, env=env)
    except BaseException:
        sub.close()
        raise
    try:
        wait_until(sub, lambda events: events,
                   lambda i: driver.generate(random_prompt(1000 + i, 40), 1, save=False),
                   "KV event (probe)")
    except BaseException:
        driver.close()
        sub.close()
        raise
    return sub, driver


def store_and_check(sub, driver, prompt, expected):
    """Generates `prompt` (its tokens must be `expected`) and waits for kvtier's BlockStored of
    its whole chunks: their hashes (parents, token ids) are those of vLLM's own events for the
    same blocks, in medium kvtier:host. Their hashes, in prompt order."""
    assert driver.generate(prompt) == expected, "the connector changed the greedy tokens"

    def stored(events):
        mine = chain(blocks_of(events, kvtier=True), prompt)
        return mine if len(mine) == len(prompt) // BLOCK else None

    mine = wait_until(sub, stored,
                      lambda i: driver.generate(random_prompt(2000 + i, 40), 1, save=False),
                      "BlockStored(kvtier:host) for every whole chunk of the prompt")
    own = chain(blocks_of(sub.snapshot(), kvtier=False), prompt)
    assert own == mine, "kvtier's block hashes are not vLLM's own for the same blocks"
    media = {e.medium for e in sub.snapshot() if type(e).__name__ == "BlockStored"
             and set(e.block_hashes) & set(mine) and e.medium.startswith("kvtier:")}
    assert media == {"kvtier:host"}, media
    return mine


def test_vllm_publishes_kvtier_stored_and_removed_under_vllms_block_hashes(
        tmp_path, tmp_path_factory, model):
    prompt = random_prompt(1, 6 * BLOCK + 9)   # 6 whole chunks and a partial one
    expected = baseline_tokens(tmp_path, model, [prompt])[0]
    sub, driver = start_vllm(tmp_path, tmp_path_factory, model)
    try:
        mine = store_and_check(sub, driver, prompt, expected)

        # Other prompts fill the 16-chunk host tier (no SSD): the prompt's chunks are evicted,
        # all but the first maybe (kvtier stores a sequence's first chunk, its attention sink, at
        # high priority: it outlives the chunks of normal priority).
        def removed(events):
            gone = {h for e in events if type(e).__name__ == "BlockRemoved"
                    and e.medium == "kvtier:host" for h in e.block_hashes}
            return set(mine[1:]) <= gone

        wait_until(sub, removed, lambda i: driver.generate(random_prompt(3000 + i, 6 * BLOCK), 1),
                   "BlockRemoved(kvtier:host) for the evicted prompt")
        held = announced(sub.snapshot())
        still = [h for h in mine if h in held]
        assert still == mine[:len(still)], "a chunk is announced after one that was removed"
        assert driver.generate(prompt) == expected, "the connector changed the greedy tokens"
    finally:
        driver.close()
        sub.close()
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["kv_events_errors"] == 0 and stats["kv_events_stored"] >= len(mine), stats


def test_two_tensor_parallel_ranks_publish_each_chunk_once(tmp_path, tmp_path_factory, model):
    """TP=2 (one worker process per rank, each rank storing its shard): vLLM's executor merges
    the ranks' events and the scheduler publishes each chunk's once both ranks reported it."""
    from test_vllm_tp import TP_ENV

    prompt = random_prompt(5, 6 * BLOCK + 9)
    expected = baseline_tokens(tmp_path, model, [prompt])[0]
    sub, driver = start_vllm(tmp_path, tmp_path_factory, model, tp=2, env=TP_ENV)
    try:
        mine = store_and_check(sub, driver, prompt, expected)
    finally:
        driver.close()
        sub.close()
    stored = [e for e in sub.snapshot() if type(e).__name__ == "BlockStored"
              and e.medium.startswith("kvtier:") and set(e.block_hashes) & set(mine)]
    assert sorted(h for e in stored for h in e.block_hashes) == sorted(mine), \
        "a chunk was published more than once (once per rank?)"


if __name__ == "__main__" and sys.argv[1:2] == ["--driver"]:
    sys.exit(driver_main())
