"""End to end against a real vLLM with hybrid attention (Gemma-3's architecture: sliding-window
and full-attention layers), with vLLM's hybrid KV cache manager on: KvtierConnector stores and
loads each KV cache group, a sliding-window group only the chunks of its window.

Goal: the connector declares SupportsHMA, so vLLM keeps its hybrid KV cache manager on and gives
each attention type its own KV cache group (block table); kvtier caches every chunk of a prompt
for the full-attention group, and for the sliding-window group only the chunks of the window
before the prompt's first uncomputed token, and loads exactly those: the chunks a hit loads are
checked per group, and the sliding-window group's loaded chunks are the window's and no other.
After a restart the pages kvtier loads from the SSD tier are, byte for byte, the pages it stored
(for a prompt computed whole, the pages vLLM computed without kvtier), and the greedy tokens
equal vLLM's without kvtier. The bytes moved per hit (the connector's loaded_bytes) are checked
against the chunks loaded and printed, next to what a model of full attention only would move.

Method: tests/vllm/make_model.py --arch gemma3 writes a small Gemma-3 with random weights whose
four layers alternate sliding-window (64 tokens: two 32-token pages) and full attention, made
decisive like the Llama of test_vllm_e2e.py (every generated token's top-1 logit leads by at least
MIN_MARGIN, checked, so a token check compares KV, not rounding). Prompt 1 extends prompt 0 (a
conversation's next turn). Three vLLM processes for it (tests/vllm/run_vllm.py through
test_vllm_e2e.run, vLLM's own prefix cache off, so every hit is kvtier's):
  1. baseline: the dump connector with kvtier off: prompt 0, prompt 0 again, prompt 1;
  2. store: the same prompts with kvtier on an empty cache directory: prompt 0 is computed (its
     pages equal the baseline's, both groups); prompt 0 again loads every token but its last
     from the host tier (full group chunks 0-7, sliding-window group chunks 5-7 only), prompt 1
     loads prompt 0's whole chunks (0-6; window chunks 5-6); the loaded rows equal the computed
     ones; the startup log names the groups;
  3. load: a new process on the same directory, prompts 0 and 1: both load every token but their
     last from the SSD tier (prompt 1: chunks 0-8, window chunks 6-8, the window stored by
     prompt 1 in run 2 and prompt 0's chunk 6), the loaded rows equal the stored ones, and the
     tokens equal the baseline's.
  4. a state-space model (make_model.py --arch mamba) with the connector: vLLM stops at startup
     with the connector's message naming the layer type (MambaSpec); a fourth vLLM process, which
     ends before it computes anything.
A sliding-window group's pages before its window are vLLM's null page after a hit: only the
window's chunks are compared there (test_vllm_e2e.first_difference, on the rows of the tokens the
hit gave).

Requires vLLM (scripts/setup_vllm_venv.sh installs it into .venv-vllm); a missing one is a skip,
which KVTIER_REQUIRE_RESOURCES=1 (CI) turns into a failure.
"""

import json
import os
import subprocess
import sys

import pytest

# pytestmark: skipped (a failure in CI) without vLLM, as every test here.
from test_vllm_e2e import (BLOCK, HERE, MAX_TOKENS, connector, first_difference,  # noqa: F401
                           pages, pytestmark, run, stats)

WINDOW = 64  # make_model.py's SLIDING_WINDOW for --arch gemma3


def prompts():
    """Prompt 0 (230 tokens: 7 whole pages and 6 tokens) and prompt 1, prompt 0 and 40 more
    tokens; byte tokens."""
    import random

    rng = random.Random(31)
    first = [rng.randrange(3, 259) for _ in range(230)]
    return [{"tokens": first}, {"tokens": first + [rng.randrange(3, 259) for _ in range(40)]}]


def window_chunks(hit):
    """The chunks a sliding-window group needs after a hit of `hit` tokens (the connector's
    window_start_chunk): from the one holding token hit - WINDOW + 1 to the one holding hit - 1."""
    return list(range(max(0, hit - WINDOW + 1) // BLOCK, -(-hit // BLOCK)))


def group_view(dump, kind):
    """One group of a dump as a dump of its own (first_difference takes it)."""
    groups = [g for g in dump["groups"] if g["kind"] == kind]
    assert len(groups) == 1, [g["kind"] for g in dump["groups"]]
    return {"tokens": dump["tokens"], "layers": groups[0]["layers"]}, groups[0]


def assert_rows_equal(expected, got, tokens, what):
    """The rows of the first `tokens` tokens are equal in both groups: every chunk of the
    full-attention group, the window's chunks of the sliding-window group."""
    full = range(-(-tokens // BLOCK))
    diff = first_difference(group_view(expected, "full")[0], group_view(got, "full")[0], full,
                            tokens)
    assert diff is None, f"{what}: full-attention group differs at {diff}"
    window = window_chunks(tokens)
    diff = first_difference(group_view(expected, "sliding")[0], group_view(got, "sliding")[0],
                            range(window[0], window[-1] + 1), tokens)
    assert diff is None, f"{what}: sliding-window group differs at {diff}"


def assert_loaded(dump, hit, what):
    """The dump's request loaded `hit` tokens: every chunk of the full-attention group, the
    window's chunks only of the sliding-window group."""
    _, sliding = group_view(dump, "sliding")
    index = next(i for i, g in enumerate(dump["groups"]) if g is sliding)
    assert dump["loaded"] == [0, -(-hit // BLOCK)] and not dump["failed"], (what, dump["loaded"])
    assert dump["window_loaded"] == {index: window_chunks(hit)}, (what, dump["window_loaded"])


def page_bytes(dump):
    layer = dump["groups"][0]["layers"][0]
    return layer[0].numel() * layer.element_size()


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_hybrid")
    model = tmp / "model"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(model), "--arch", "gemma3"],
                   check=True, capture_output=True)
    ps = prompts()
    state = {"tmp": tmp, "model": model, "prompts": ps, "cache": tmp / "cache",
             "store_order": [ps[0], ps[0], ps[1]]}
    state["baseline"] = run(model, tmp, "baseline", state["store_order"],
                            connector({"kvtier": False}))
    state["baseline_pages"] = pages(tmp, "baseline")
    assert len(state["baseline_pages"]) == 3
    assert all(len(o) == MAX_TOKENS for o in state["baseline"])
    assert [g["kind"] for g in state["baseline_pages"][0]["groups"]] in (
        ["sliding", "full"], ["full", "sliding"]), "vLLM did not keep one group per attention type"
    return state


def kvtier_config(state, name):
    return {"host_bytes": 32 << 20, "ssd_dirs": [str(state["cache"])], "ssd_bytes": 64 << 20,
            "ssd_segment_bytes": 4 << 20, "stats_file": str(state["tmp"] / f"{name}.stats.json")}


def test_1_store_groups(hybrid):
    tmp, ps, base = hybrid["tmp"], hybrid["prompts"], hybrid["baseline_pages"]
    out = run(hybrid["model"], tmp, "store", hybrid["store_order"],
              connector(kvtier_config(hybrid, "store")))
    assert out == hybrid["baseline"]
    log = (tmp / "store.log").read_text()
    assert "Turning off hybrid kv cache manager" not in log
    assert "KV cache groups:" in log and "sliding window of 64 tokens" in log, \
        "the connector's startup lines do not name the KV cache groups"
    got = pages(tmp, "store")
    hybrid["store_pages"] = got
    assert got[0]["loaded"] is None and not got[0]["window_loaded"]
    n0 = len(ps[0]["tokens"])
    assert_rows_equal(base[0], got[0], n0, "prompt 0 computed while kvtier stores vs the baseline")
    # Prompt 0 again: every token but its last from the host tier.
    assert_loaded(got[1], n0 - 1, "prompt 0 again")
    assert_rows_equal(got[0], got[1], n0 - 1, "prompt 0 loaded from the host tier")
    # Prompt 1 extends prompt 0: its whole chunks (7 pages, 224 tokens).
    assert_loaded(got[2], 224, "prompt 1")
    assert_rows_equal(got[0], got[2], 224, "prompt 1's prefix loaded from the host tier")


def test_2_load_after_restart(hybrid):
    tmp, ps, base = hybrid["tmp"], hybrid["prompts"], hybrid["baseline_pages"]
    stored = hybrid.get("store_pages")
    assert stored is not None, "test_1_store_groups did not run"
    out = run(hybrid["model"], tmp, "load", ps, connector(kvtier_config(hybrid, "load")))
    got = pages(tmp, "load")
    for i, (p, computed) in enumerate(zip(ps, (stored[0], stored[2]))):
        hit = len(p["tokens"]) - 1  # vLLM computes the last prompt token itself.
        assert_loaded(got[i], hit, f"prompt {i} after the restart")
        assert_rows_equal(computed, got[i], hit, f"prompt {i} loaded from the SSD tier vs stored")
    assert_rows_equal(base[0], got[0], len(ps[0]["tokens"]) - 1,
                      "prompt 0 loaded from the SSD tier vs the baseline")
    assert out == [hybrid["baseline"][0], hybrid["baseline"][2]]
    # Bytes moved per hit: a chunk is one page of each of a group's 2 layers.
    counters = stats(tmp / "load.stats.json")
    chunks = [len(range(-(-(len(p["tokens"]) - 1) // BLOCK))) for p in ps]
    windows = [len(window_chunks(len(p["tokens"]) - 1)) for p in ps]
    per_chunk = 2 * page_bytes(got[0])
    assert counters["loads"] == 2 and counters["load_failures"] == 0, counters
    assert counters["loaded_bytes"] == (sum(chunks) + sum(windows)) * per_chunk, counters
    for i in range(2):
        print(f"hybrid hit {i}: {len(ps[i]['tokens']) - 1} tokens, "
              f"{(chunks[i] + windows[i]) * per_chunk} bytes moved ({chunks[i]} full-attention "
              f"chunks + {windows[i]} sliding-window chunks of {per_chunk} bytes); every layer "
              f"as full attention would move {2 * chunks[i] * per_chunk}")


def test_3_state_space_model_is_refused_at_startup(tmp_path):
    model = tmp_path / "mamba"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(model), "--arch", "mamba",
                    "--layers", "2"], check=True, capture_output=True)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    config = connector({"host_bytes": 16 << 20, "runtime_dir": str(runtime)},
                       module="kvtier.vllm", cls="KvtierConnector")
    (tmp_path / "connector.json").write_text(json.dumps(config))
    (tmp_path / "prompts.json").write_text(json.dumps([{"tokens": list(range(5, 40))}]))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in env.get("PYTHONPATH", "")
                                                       .split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, str(HERE / "run_vllm.py"), "--model", str(model),
                           "--prompts", str(tmp_path / "prompts.json"), "--out",
                           str(tmp_path / "out.json"), "--connector",
                           str(tmp_path / "connector.json"), "--max-model-len", "1024"],
                          env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, "vLLM ran a state-space model with the connector"
    assert "KvtierConnector: KV cache group 0 has layers of type MambaSpec" in log and \
        "state-space or linear-attention layers" in log, log[-4000:]
