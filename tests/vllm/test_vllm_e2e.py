"""End to end against a real vLLM: KvtierConnector stores and loads the KV vLLM computes.

Goal: a fresh vLLM process gets a prompt's prefix from kvtier (from the host tier in the same
process, from the SSD tier after a restart, from the Redis tier on another "node"), and the pages
kvtier loads are, byte for byte, the pages vLLM computed for that prompt without kvtier; the
greedy tokens equal vLLM's without kvtier; vLLM really uses the loaded KV (altered KV changes the
tokens and stays in the pages); another cache_salt misses.

Method: tests/vllm/make_model.py writes a small Llama with random weights and a byte tokenizer
(no hub access), made decisive: every run reports each generated token's top-1 minus top-2 logit
and the test requires at least MIN_MARGIN, so no rounding difference can flip a token and a token
check compares KV, not rounding. Each step is a separate vLLM process (tests/vllm/run_vllm.py,
vLLM's offline API on the CPU backend) so that nothing survives in vLLM's memory between steps;
vLLM's own prefix cache is off, so any reuse comes from kvtier. The runs use
tests/vllm/dump_connector.py (KvtierConnector, plus a file per prompt with its full pages, every
layer, copied after the step that completes the prompt; with "kvtier": false it does nothing else,
which is the baseline). first_difference() compares two dumps and names the first differing
layer, page and byte. What kvtier did is read from the connector's stats file.
  1. baseline: the dump connector with kvtier off (the pages vLLM computes), and a run without any
     connector that gives the same tokens;
  2. store: kvtier on an empty cache directory; the pages it computes equal the baseline's, byte
     for byte (storing does not change vLLM's computation); the prompts sharing the first
     prompt's prefix, and the first prompt asked again, load from the host tier: the loaded pages
     equal the stored ones and the baseline's;
  3. load: a new process on the same directory: every prompt loads its prefix from the SSD tier
     (the host tier is empty after the restart): the loaded pages equal the stored ones, the first
     prompt's equal the baseline's, and the tokens equal the baseline's; the same first prompt
     with another cache_salt loads nothing;
  4. canary: the same as 3 with a connector that adds noise to what it loaded: the dumped pages
     differ from the stored ones (first_difference finds them: vLLM kept the loaded pages and did
     not recompute them) and the tokens differ;
  5. Redis: node A (host tier + Redis, no SSD) stores; node B, a fresh process with its own empty
     host tier, loads from Redis: its pages equal node A's and the baseline's, and so do its tokens;
     5b. the same through the fs tier (fs_dir: a shared directory, sealed), whose files are
     private to the user;
  6. a corrupted SSD tier (bytes flipped inside every record of a copy of the cache directory)
     fails closed: the blocks that do not verify are reported to vLLM, which recomputes them,
     and the tokens still equal the baseline's;
  7. per-request controls (kv_transfer_params {"kvtier": ...}) in one process on an empty host
     tier: "save": false stores nothing (the next request misses), "load": false loads nothing
     from a cached prefix, "ttl_ms": 1 stores chunks that have expired by the next request,
     controls that do not parse neither load nor store, and "priority": "pinned" is taken;
     the dumps say which request loaded what, and every request's tokens are the baseline's.
  8. "partial_chunks": false: whole chunks only, never the one holding the last prompt token.
A prompt's partial last page is cached as a chunk of its own (the connector's partial_chunks,
on by default), so a hit loads every prompt token but the last; the byte comparisons cover the
rows of the prompt's tokens (the rows after them in its last page are not KV yet), and the last
prompt token's row only where both sides computed it.
vLLM on CPU needs no extra flags for the connector (it declares SupportsHMA, so vLLM's hybrid KV
cache manager stays on; a model of full attention only has one KV cache group either way).

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
# The least top-1 minus top-2 logit a generated token may have. The test model's margins are above
# 10 at every step; rounding differences between vLLM's code paths move a logit by far less than
# this (docs/integration.md, "Why a token check needs a decisive model").
MIN_MARGIN = 4.0

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


def run(model, tmp, name, prompt_list, connector=None, env=None, check_margins=True, tp=1):
    """Runs vLLM on the prompts; their greedy tokens. connector: its --kv-transfer-config; a
    "dump_dir" in its extra config is filled with the run's page dumps (pages(tmp, name)).
    tp: tensor-parallel ranks."""
    pfile = tmp / f"{name}.prompts.json"
    pfile.write_text(json.dumps(prompt_list))
    out = tmp / f"{name}.out.json"
    cmd = [sys.executable, str(HERE / "run_vllm.py"), "--model", str(model), "--prompts",
           str(pfile), "--out", str(out), "--max-tokens", str(MAX_TOKENS), "--block-size",
           str(BLOCK), "--max-model-len", "1024"]
    if tp > 1:
        cmd += ["--tensor-parallel-size", str(tp)]
    if connector is not None:
        extra = connector["kv_connector_extra_config"]
        if "dump_dir" not in extra:
            extra["dump_dir"] = str(tmp / f"{name}.pages")
        os.makedirs(extra["dump_dir"], exist_ok=True)
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
    result = json.loads(out.read_text())
    if check_margins:
        for i, margins in enumerate(result["margins"]):
            assert len(margins) == len(result["outputs"][i]), (name, i, margins)
            low = min(margins)
            assert low >= MIN_MARGIN, (
                f"{name}: prompt {i}, generated token {margins.index(low)}: the top-1 logit leads "
                f"the top-2 by {low:.3f} < {MIN_MARGIN}; a rounding difference could flip it, so "
                "the test model is not decisive enough for a token check (make_model.py)")
    return result["outputs"]


def connector(extra, module="dump_connector", cls="DumpKvtierConnector"):
    # "recompute": a block kvtier cannot load (it failed verification) is recomputed by vLLM;
    # vLLM's default, "fail", would fail the request instead.
    return {"kv_connector": cls, "kv_connector_module_path": module, "kv_role": "kv_both",
            "kv_load_failure_policy": "recompute", "kv_connector_extra_config": dict(extra)}


def pages(tmp, name):
    """A run's page dumps (dump_connector.py), in the order its prompts completed."""
    import torch

    return [torch.load(p) for p in sorted((tmp / f"{name}.pages").glob("*.pt"))]


_SLOT_MASKS = {}


def slot_mask(page, first, end):
    """The elements of a page ([heads][tokens][2 * head_dim] as vLLM shows it) that hold slots
    [first, end), found with vLLM's own cache writer: where a token's K sits inside a CPU page
    depends on the attention ISA (vec: per head a [head_dim][tokens] K; amx: packed)."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    key = (tuple(page.shape), page.dtype)
    if key not in _SLOT_MASKS:
        heads, slots, width = page.shape
        isa = _get_attn_isa(page.dtype, slots, width // 2)
        masks = []
        for slot in range(slots):
            cache = torch.zeros((1, heads, slots, width), dtype=page.dtype)
            k, v = cache.view(1, heads, 2 * slots, width // 2).chunk(2, dim=2)
            ones = torch.ones((1, heads, width // 2), dtype=page.dtype)
            ops.cpu_attn_reshape_and_cache(ones, ones, k, v,
                                           torch.tensor([slot], dtype=torch.int64), isa)
            masks.append(cache[0] != 0)
        _SLOT_MASKS[key] = masks
    masks = _SLOT_MASKS[key]
    out = torch.zeros_like(masks[0])
    for slot in range(first, end):
        out |= masks[slot]
    return out


def token_rows(page, n):
    """The bytes of a page's first n tokens (K and V)."""
    return page.contiguous()[slot_mask(page, 0, n)]


def first_difference(expected, got, chunks, tokens=None):
    """None when the pages of chunks (a range of page indices in the prompt) hold the same bytes
    in expected and got (two dumps of the same prompt) in every layer, for the prompt's first
    `tokens` tokens (default: all but the last, the one vLLM computes after a hit; rows after the
    prompt are never compared); otherwise where they first differ: the layer, the page (and its
    tokens) and the byte offset in the page's compared rows."""
    import torch

    span = slice(chunks.start * BLOCK, chunks.stop * BLOCK)
    assert expected["tokens"][span] == got["tokens"][span], "dumps of different prompts"
    if tokens is None:
        tokens = len(expected["tokens"]) - 1
    for layer, (a, b) in enumerate(zip(expected["layers"], got["layers"])):
        for c in chunks:
            n = min(BLOCK, tokens - c * BLOCK)
            if n <= 0:
                continue
            x = token_rows(a[c], n).view(-1).view(torch.uint8)
            y = token_rows(b[c], n).view(-1).view(torch.uint8)
            if not torch.equal(x, y):
                offset = int((x != y).nonzero()[0])
                return (f"layer {layer}, page {c} (tokens {c * BLOCK}..{c * BLOCK + BLOCK - 1}), "
                        f"byte {offset} of {x.numel()}: 0x{int(x[offset]):02x} expected, "
                        f"0x{int(y[offset]):02x} found")
    return None


def assert_after_prompt_zero(got, what):
    """The slots after the prompt in its last page are zeros at the end of the step that loaded
    it: the partial chunk was stored with zeros there, not with the page's stale KV (the page was
    used before by another request of the process)."""
    n = len(got["tokens"])
    if n % BLOCK == 0:
        return
    for layer, pages_of_layer in enumerate(got["layers"]):
        page = pages_of_layer[n // BLOCK].contiguous()
        rest = page[slot_mask(page, n % BLOCK, BLOCK)]
        assert not rest.any(), f"{what}: layer {layer}: slots after the prompt are not zeros"


def assert_same_pages(expected, got, chunks, what):
    diff = first_difference(expected, got, chunks)
    assert diff is None, f"{what}: the pages differ at {diff}"


def all_chunks(prompt):
    """Every page that holds a token of the prompt, the last one maybe in part."""
    return range(-(-len(prompt["tokens"]) // BLOCK))


def loadable_chunks(prompt):
    """The chunks kvtier gives a prompt: every token but its last (vLLM computes that one), so
    the pages up to the one holding its last but one token, that one maybe in part (the prompt's
    partial last chunk is cached as a chunk of its own, "partial_chunks")."""
    return range(-(-(len(prompt["tokens"]) - 1) // BLOCK))


def loadable_tokens(prompt):
    return len(prompt["tokens"]) - 1


def stored_chunks(prompt):
    """The chunks a store of the prompt keeps: its whole chunks and its partial last one (of at
    least 2 tokens)."""
    n = len(prompt["tokens"])
    return n // BLOCK + int(n % BLOCK > 1)


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
    state["baseline"] = run(model, tmp, "baseline", state["prompts"],
                            connector({"kvtier": False}))
    state["baseline_pages"] = pages(tmp, "baseline")
    assert len(state["baseline_pages"]) == len(state["prompts"])
    return state


def ssd_config(work, stats_file):
    return {"host_bytes": 64 << 20, "ssd_dirs": [str(work["cache"])], "ssd_bytes": 256 << 20,
            "ssd_segment_bytes": 4 << 20, "stats_file": str(stats_file),
            "runtime_dir": str(work["runtime"])}


def test_1_baseline_is_deterministic(work):
    # Without any connector: the same tokens as the dump connector's baseline.
    again = run(work["model"], work["tmp"], "baseline2", work["prompts"][:1])
    assert again[0] == work["baseline"][0]
    assert all(len(o) == MAX_TOKENS for o in work["baseline"])


def test_2_store(work):
    s = work["tmp"] / "store.stats.json"
    # The first prompt again at the end: all its loadable chunks come from the host tier.
    out = run(work["model"], work["tmp"], "store", work["prompts"] + work["prompts"][:1],
              connector(ssd_config(work, s)))
    assert out[:3] == work["baseline"] and out[3] == work["baseline"][0]
    base, got, p0 = work["baseline_pages"], pages(work["tmp"], "store"), work["prompts"][0]
    work["store_pages"] = got
    # Nothing loaded into the first prompt: vLLM computed its pages, as in the baseline.
    assert got[0]["loaded"] is None
    assert first_difference(base[0], got[0], all_chunks(p0), len(p0["tokens"])) is None, \
        "prompt 0 computed while kvtier stores differs from the baseline"
    # The shared prefix (5 pages) of prompts 1 and 2 came from the host tier: the pages prompt 0
    # computed and kvtier stored.
    for i in (1, 2):
        assert got[i]["loaded"] == [0, 5] and not got[i]["failed"], got[i]["loaded"]
        assert_same_pages(got[0], got[i], range(5), f"prompt {i} loaded from the host tier")
    # Prompt 0 again: every token but its last from the host tier, the baseline's bytes.
    assert got[3]["loaded"] == [0, len(loadable_chunks(p0))] and not got[3]["failed"]
    assert_same_pages(base[0], got[3], loadable_chunks(p0), "prompt 0 loaded from the host tier")
    assert_after_prompt_zero(got[3], "prompt 0 loaded from the host tier")
    st = stats(s)
    # The first prompt stores its chunks; the others share the first 5 and store the rest.
    assert st["saves"] == 3, st
    assert st["stored_chunks"] >= stored_chunks(p0), st
    # Only the chunks kvtier did not have are copied out: 7 whole and a partial one, then 8 + 1
    # - 5 and 9 + 1 - 5 (the 5 shared chunks were a kvtier hit); prompt 0 again has nothing new.
    assert [stored_chunks(p) for p in work["prompts"]] == [8, 9, 10]
    assert st["saved_chunks"] == 8 + 4 + 5, st
    # Prompts 1 and 2 load the 5 shared chunks, prompt 0 again every token but its last.
    assert st["loads"] == 3 and st["loaded_tokens"] == 5 * BLOCK * 2 + loadable_tokens(p0), st
    assert st["tiers"]["host"]["hits"] > 0, st


def test_3_restart_loads_from_ssd_and_matches(work):
    s = work["tmp"] / "load.stats.json"
    salted = dict(work["prompts"][0], cache_salt="another-tenant")
    out = run(work["model"], work["tmp"], "load", work["prompts"] + [salted],
              connector(ssd_config(work, s)))
    assert out[:3] == work["baseline"], "tokens after a kvtier load differ from the baseline"
    assert out[3] == work["baseline"][0]
    got, stored = pages(work["tmp"], "load"), work["store_pages"]
    for i, prompt in enumerate(work["prompts"]):
        chunks = loadable_chunks(prompt)
        assert got[i]["loaded"] == [0, len(chunks)] and not got[i]["failed"], got[i]["loaded"]
        assert_same_pages(stored[i], got[i], chunks, f"prompt {i} loaded from the SSD tier")
    assert_same_pages(work["baseline_pages"][0], got[0], loadable_chunks(work["prompts"][0]),
                      "prompt 0 loaded from the SSD tier, against the baseline")
    for i in range(3):
        assert_after_prompt_zero(got[i], f"prompt {i} loaded from the SSD tier")
    assert got[3]["loaded"] is None  # Another tenant: nothing loaded.
    st = stats(s)
    assert st["loads"] == 3, st          # The salted prompt loaded nothing...
    # ...and was stored in its own namespace; nothing else.
    assert st["saved_chunks"] == stored_chunks(work["prompts"][0]), st
    assert st["load_failures"] == 0, st
    # Every prompt token but the last came from kvtier.
    expected = sum(loadable_tokens(p) for p in work["prompts"])
    assert st["loaded_tokens"] == expected, st
    assert st["tiers"]["ssd"]["hits"] > 0, st
    assert st["loaded_bytes"] > 0 and st["load_stall_s"] >= 0, st


def test_4_altered_kv_changes_the_tokens(work):
    s = work["tmp"] / "canary.stats.json"
    out = run(work["model"], work["tmp"], "canary", work["prompts"],
              connector(ssd_config(work, s), module="canary_connector",
                        cls="CanaryKvtierConnector"), check_margins=False)
    st = stats(s)
    assert st["loads"] == 3, st
    # The byte comparison sees the alteration (it is not blind), and the altered pages were still
    # in vLLM after the step: the loaded KV is what attention read, not recomputed over.
    got = pages(work["tmp"], "canary")
    diff = first_difference(work["store_pages"][0], got[0], loadable_chunks(work["prompts"][0]))
    assert diff is not None and diff.startswith("layer 0, page 0"), diff
    assert out != work["baseline"], "altered KV left every token unchanged: is the load used?"


def two_nodes_share_a_prefix(work, tmp_path, remote: dict, name: str, where: str,
                             between=None):
    """Node A (host tier + the remote tier `remote`, no SSD) stores the prompts; node B, a
    fresh process with its own empty host tier, loads them from the remote tier: its pages equal
    node A's and the baseline's, and so do both nodes' tokens. `between` runs after node A."""
    import kvtier

    key = tmp_path / "remote.keys"
    key.write_text(kvtier.generate_remote_key(1))
    key.chmod(0o600)

    def node(label):
        s = work["tmp"] / f"{label}.stats.json"
        extra = {"host_bytes": 64 << 20, **remote, "remote_key_file": str(key),
                 "salt": "deployment-1", "stats_file": str(s),
                 "runtime_dir": str(work["runtime"])}
        return run(work["model"], work["tmp"], label, work["prompts"], connector(extra)), stats(s)

    out_a, st_a = node(f"{name}_a")
    assert out_a == work["baseline"]
    assert st_a["stored_chunks"] >= 7, st_a
    if between is not None:
        between()
    out_b, st_b = node(f"{name}_b")
    assert out_b == work["baseline"]
    assert st_b["loads"] == 3, st_b
    assert st_b["tiers"]["remote"]["hits"] > 0, st_b
    pages_a, pages_b = pages(work["tmp"], f"{name}_a"), pages(work["tmp"], f"{name}_b")
    for i, prompt in enumerate(work["prompts"]):
        chunks = loadable_chunks(prompt)
        assert pages_b[i]["loaded"] == [0, len(chunks)] and not pages_b[i]["failed"]
        assert_same_pages(pages_a[i], pages_b[i], chunks, f"prompt {i} loaded from {where}")
    assert_same_pages(work["baseline_pages"][0], pages_b[0], loadable_chunks(work["prompts"][0]),
                      f"prompt 0 loaded from {where}, against the baseline")


def test_5_two_vllm_processes_share_a_prefix_through_redis(work, redis_endpoint, tmp_path):
    two_nodes_share_a_prefix(work, tmp_path, {"remote_endpoints": [redis_endpoint]}, "redis",
                             "Redis")


def test_5b_two_vllm_processes_share_a_prefix_through_a_shared_directory(work, tmp_path):
    shared = tmp_path / "shared"

    def files_are_private():
        files = [p for p in shared.rglob("*") if p.is_file()]
        assert files and all(p.stat().st_mode & 0o077 == 0 for p in files), files[:3]

    two_nodes_share_a_prefix(work, tmp_path, {"fs_dir": str(shared), "fs_bytes_max": 1 << 30},
                             "fs", "the fs tier", between=files_are_private)


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
    assert st["load_failures"] > 0 or \
        st["loaded_tokens"] < sum(loadable_tokens(p) for p in work["prompts"]), st


def test_7_per_request_controls(work):
    s = work["tmp"] / "controls.stats.json"
    config = {"host_bytes": 64 << 20, "stats_file": str(s), "runtime_dir": str(work["runtime"])}
    p0 = work["prompts"][0]

    def ask(controls, salt=None):
        p = dict(p0, kv_transfer_params={"kvtier": controls})
        if salt:
            p["cache_salt"] = salt
        return p

    plan = [ask({"save": False}),                   # 0: computed, not stored
            ask({}),                                # 1: a miss (0 stored nothing); stored
            ask({"load": False}),                   # 2: cached, but computed
            ask({}),                                # 3: a hit
            ask({"ttl_ms": 1}, salt="ttl"),         # 4: another namespace; stored, 1 ms TTL
            ask({}, salt="ttl"),                    # 5: expired: a miss; stored again
            ask({}, salt="ttl"),                    # 6: a hit
            ask({"sav": False}),                    # 7: controls that do not parse: computed
            ask({"priority": "pinned", "ttl_ms": 0})]  # 8: a hit
    out = run(work["model"], work["tmp"], "controls", plan, connector(config))
    assert out == [work["baseline"][0]] * len(plan), "a request's tokens differ from the baseline"
    got = pages(work["tmp"], "controls")
    assert len(got) == len(plan)
    every = [0, len(loadable_chunks(p0))]
    loaded = [g["loaded"] for g in got]
    assert loaded == [None, None, None, every, None, None, every, None, every], loaded
    for i in (3, 6, 8):
        assert not got[i]["failed"]
        assert_same_pages(work["baseline_pages"][0], got[i], loadable_chunks(p0),
                          f"request {i} loaded from the host tier")
        # Requests 1 and 5 stored into pages that earlier requests of the process had used (and
        # decoded into after the prompt): the stored partial chunks still hold zeros there.
        assert_after_prompt_zero(got[i], f"request {i} loaded from the host tier")
    st = stats(s)
    # Stored: requests 1, 4 and 5 (8 chunks each: 7 whole and the partial last one); request 2
    # offered its chunks again (already cached: none new); 0 and 7 offered nothing; 3, 6 and 8
    # had nothing new.
    assert st["saves"] == 4 and st["stored_chunks"] == 3 * stored_chunks(p0), st
    assert st["loads"] == 3 and st["load_failures"] == 0, st


def test_8_whole_chunks_only(work):
    s = work["tmp"] / "whole.stats.json"
    config = {"host_bytes": 64 << 20, "stats_file": str(s), "runtime_dir": str(work["runtime"]),
              "partial_chunks": False}
    p0 = work["prompts"][0]
    out = run(work["model"], work["tmp"], "whole", [p0, p0], connector(config))
    assert out == [work["baseline"][0]] * 2
    got = pages(work["tmp"], "whole")
    whole = (len(p0["tokens"]) - 1) // BLOCK
    assert got[0]["loaded"] is None and got[1]["loaded"] == [0, whole], got[1]["loaded"]
    assert_same_pages(work["baseline_pages"][0], got[1], range(whole),
                      "prompt 0 loaded whole chunks from the host tier")
    st = stats(s)
    assert st["stored_chunks"] == len(p0["tokens"]) // BLOCK, st
    assert st["loads"] == 1 and st["loaded_tokens"] == whole * BLOCK, st
