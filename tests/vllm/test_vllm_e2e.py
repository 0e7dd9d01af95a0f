"""End to end against a real vLLM: KvtierConnector stores and loads the KV vLLM computes.

Goal: a fresh vLLM process gets a prompt's prefix from kvtier (from the SSD tier after a restart,
from the Redis tier on another "node"), produces the same greedy tokens as vLLM without kvtier,
and really uses the loaded KV (altered KV changes the tokens); another cache_salt misses.

Method: tests/vllm/make_model.py writes a small Llama with random weights and a byte tokenizer
(no hub access). Each step is a separate vLLM process (tests/vllm/run_vllm.py, vLLM's offline
API on the CPU backend) so that nothing survives in vLLM's memory between steps; vLLM's own prefix
cache is off, so any reuse comes from kvtier. What kvtier did is read from the connector's stats
file (its counters and the engine's per-tier hits), written by the worker process.
  1. baseline: no connector;
  2. store: the connector on an empty cache directory (nothing to load, the prompts are stored);
  3. load: a new process on the same directory: every prompt loads its prefix from the SSD tier
     (the host tier is empty after the restart), the tokens equal the baseline's; the same first
     prompt with another cache_salt loads nothing;
  4. canary: the same as 3 with a connector that adds noise to what it loaded: tokens differ;
  5. Redis: node A (host tier + Redis, no SSD) stores; node B, a fresh process with its own empty
     host tier, loads from Redis and matches the baseline;
  6. a corrupted SSD tier (bytes flipped inside every record of a copy of the cache directory)
     fails closed: the blocks that do not verify are reported to vLLM, which recomputes them,
     and the tokens still equal the baseline's.
vLLM on CPU needs no extra flags for the connector; vLLM turns off its hybrid KV cache manager by
itself when a connector that does not declare support for it is configured (logged).

Requires vLLM (scripts/setup_vllm_venv.sh installs it into .venv-vllm) and redis-server; a
missing one is a skip, which KVTIER_REQUIRE_RESOURCES=1 (CI) turns into a failure.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BLOCK = 32
MAX_TOKENS = 12

try:
    import vllm  # noqa: F401
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed "
                                "(scripts/setup_vllm_venv.sh)")


def prompts():
    """Three prompts sharing a 160-token prefix (5 pages), 200-300 tokens each; byte tokens."""
    import random

    rng = random.Random(11)
    prefix = [rng.randrange(3, 259) for _ in range(160)]
    out = []
    for n in (70, 105, 140):
        out.append({"tokens": prefix + [rng.randrange(3, 259) for _ in range(n)]})
    return out


def run(model, tmp, name, prompt_list, connector=None, env=None):
    pfile = tmp / f"{name}.prompts.json"
    pfile.write_text(json.dumps(prompt_list))
    out = tmp / f"{name}.out.json"
    cmd = [sys.executable, str(HERE / "run_vllm.py"), "--model", str(model), "--prompts",
           str(pfile), "--out", str(out), "--max-tokens", str(MAX_TOKENS), "--block-size",
           str(BLOCK), "--max-model-len", "1024"]
    if connector is not None:
        cfile = tmp / f"{name}.connector.json"
        cfile.write_text(json.dumps(connector))
        cmd += ["--connector", str(cfile)]
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE)] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    full_env.update(env or {})
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=600)
    log = tmp / f"{name}.log"
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{name}: vLLM failed (exit {proc.returncode}); log {log}:\n" + \
        (proc.stdout + proc.stderr)[-4000:]
    return json.loads(out.read_text())["outputs"]


def connector(extra, module="kvtier.vllm", cls="KvtierConnector"):
    # "recompute": a block kvtier cannot load (it failed verification) is recomputed by vLLM;
    # vLLM's default, "fail", would fail the request instead.
    return {"kv_connector": cls, "kv_connector_module_path": module, "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute", "kv_connector_extra_config": extra}


def stats(path):
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm")
    model = tmp / "model"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(model)], check=True,
                   capture_output=True)
    state = {"tmp": tmp, "model": model, "prompts": prompts(), "cache": tmp / "cache",
             "runtime": tmp / "run"}
    state["runtime"].mkdir(mode=0o700)
    state["baseline"] = run(model, tmp, "baseline", state["prompts"])
    return state


def ssd_config(work, stats_file):
    return {"host_bytes": 64 << 20, "ssd_dirs": [str(work["cache"])], "ssd_bytes": 256 << 20,
            "ssd_segment_bytes": 4 << 20, "stats_file": str(stats_file),
            "runtime_dir": str(work["runtime"])}


def test_1_baseline_is_deterministic(work):
    again = run(work["model"], work["tmp"], "baseline2", work["prompts"][:1])
    assert again[0] == work["baseline"][0]
    assert all(len(o) == MAX_TOKENS for o in work["baseline"])


def test_2_store(work):
    s = work["tmp"] / "store.stats.json"
    out = run(work["model"], work["tmp"], "store", work["prompts"],
              connector(ssd_config(work, s)))
    assert out == work["baseline"]
    st = stats(s)
    # The first prompt stores its chunks; the others share the first 5 and store the rest.
    assert st["saves"] == 3, st
    assert st["stored_chunks"] >= 7, st
    # Only the chunks kvtier did not have are copied out: 7, then 8 - 5 and 9 - 5 (the 5 shared
    # chunks were a kvtier hit).
    assert st["saved_chunks"] == 7 + 3 + 4, st
    assert st["loads"] == 0 or st["loaded_tokens"] > 0, st


def test_3_restart_loads_from_ssd_and_matches(work):
    s = work["tmp"] / "load.stats.json"
    salted = dict(work["prompts"][0], cache_salt="another-tenant")
    out = run(work["model"], work["tmp"], "load", work["prompts"] + [salted],
              connector(ssd_config(work, s)))
    assert out[:3] == work["baseline"], "tokens after a kvtier load differ from the baseline"
    assert out[3] == work["baseline"][0]
    st = stats(s)
    assert st["loads"] == 3, st          # The salted prompt loaded nothing...
    assert st["saved_chunks"] == 7, st   # ...and was stored in its own namespace; nothing else.
    assert st["load_failures"] == 0, st
    # Every prompt's full chunks but the one holding its last token came from kvtier.
    expected = sum((len(p["tokens"]) - 1) // BLOCK * BLOCK for p in work["prompts"])
    assert st["loaded_tokens"] == expected, st
    assert st["tiers"]["ssd"]["hits"] > 0, st
    assert st["loaded_bytes"] > 0 and st["load_stall_s"] >= 0, st


def test_4_altered_kv_changes_the_tokens(work):
    s = work["tmp"] / "canary.stats.json"
    out = run(work["model"], work["tmp"], "canary", work["prompts"],
              connector(ssd_config(work, s), module="canary_connector",
                        cls="CanaryKvtierConnector"))
    st = stats(s)
    assert st["loads"] == 3, st
    assert out != work["baseline"], "altered KV left every token unchanged: is the load used?"


def test_5_two_vllm_processes_share_a_prefix_through_redis(work, redis_endpoint, tmp_path):
    import kvtier

    key = tmp_path / "remote.keys"
    key.write_text(kvtier.generate_remote_key(1))
    key.chmod(0o600)

    def node(name):
        s = work["tmp"] / f"{name}.stats.json"
        extra = {"host_bytes": 64 << 20, "remote_endpoints": [redis_endpoint],
                 "remote_key_file": str(key), "salt": "deployment-1", "stats_file": str(s),
                 "runtime_dir": str(work["runtime"])}
        return run(work["model"], work["tmp"], name, work["prompts"], connector(extra)), stats(s)

    out_a, st_a = node("redis_a")
    assert out_a == work["baseline"]
    assert st_a["stored_chunks"] >= 7, st_a
    out_b, st_b = node("redis_b")
    assert out_b == work["baseline"]
    assert st_b["loads"] == 3, st_b
    assert st_b["tiers"]["remote"]["hits"] > 0, st_b


def test_6_corrupted_ssd_records_are_recomputed_not_served(work):
    import shutil

    broken = work["tmp"] / "broken-cache"
    shutil.copytree(work["cache"], broken)
    flipped = 0
    for seg in sorted(broken.glob("seg-*.kvs")):
        data = bytearray(seg.read_bytes())
        # Past the 4 KiB segment header, one byte every 1000: inside records' payloads.
        for i in range(4096 + 500, len(data), 1000):
            data[i] ^= 0x5A
            flipped += 1
        seg.write_bytes(bytes(data))
    assert flipped > 0
    s = work["tmp"] / "broken.stats.json"
    config = ssd_config(work, s)
    config["ssd_dirs"] = [str(broken)]
    out = run(work["model"], work["tmp"], "broken", work["prompts"], connector(config))
    assert out == work["baseline"], "corrupted KV reached vLLM"
    st = stats(s)
    # Either the lookup already saw the damage (fewer hits), or the loads failed closed.
    assert st["load_failures"] > 0 or st["loaded_tokens"] < 768, st
