"""End to end against a real vLLM with multi-head latent attention (MLA, DeepSeek-V2's
architecture): KvtierConnector stores the latent KV pages vLLM computes and a fresh vLLM process
loads them back.

Goal: for an MLA model, whose KV cache is one tensor per layer of one latent vector per token
(kv_lora_rank + qk_rope_head_dim elements, no K/V split), the connector caches the pages under a
latent layout (its own key namespace); after a restart the pages kvtier loads from the SSD tier
are, byte for byte, the pages it stored (for a prompt computed whole, the pages vLLM computed
without kvtier), and the greedy tokens equal vLLM's without kvtier.

Method: tests/vllm/make_model.py --arch deepseek_v2 writes a small DeepSeek-V2 with random
weights (dense MLPs, vLLM's CPU MLA sizes: latent 512 + rope 64), made decisive like the Llama of
test_vllm_e2e.py (every generated token's top-1 logit leads by at least MIN_MARGIN, checked, so a
token check compares KV, not rounding). Three vLLM processes (tests/vllm/run_vllm.py through
test_vllm_e2e.run, vLLM's own prefix cache off, which vLLM's CPU platform forces for MLA anyway):
  1. baseline: the dump connector with kvtier off: the pages and tokens vLLM computes;
  2. store: kvtier on an empty cache directory: the tokens and the first prompt's pages equal the
     baseline's; the second prompt, which shares the first one's prefix, loads it from the host
     tier and its loaded rows equal the first prompt's; the startup line names the latent layout;
  3. load: a new process on the same directory: both prompts load every token but their last
     from the SSD tier (the host tier is empty after the restart), the loaded rows equal the
     stored ones byte for byte (the first prompt's equal the baseline's too), and the tokens
     equal the baseline's.
Only the first prompt's rows are compared with the baseline: vLLM itself computes the shared
prefix's rope part with other rounding when the prompt is longer (the baseline's two prompts
differ there, byte 1024 of a row: the rope key's first element), so the second prompt's prefix,
loaded from the first prompt's computation, is compared with what was stored.
vLLM's CPU MLA backend picks the page size (on some CPUs 16 tokens, overriding the block size; on
others, one with AMX among them, the 32 asked for), so the tests read it from the baseline's
pages, and kvtier's chunks are that long. An MLA page is [page_tokens][latent]: a token's KV is one row, and the
comparisons cover the rows of the prompt's tokens (rows after them are not KV yet). vLLM's CPU
MLA backend shows a layer as [pages, 1, page_tokens, latent]; the connector takes that shape.

Requires vLLM (scripts/setup_vllm_venv.sh installs it into .venv-vllm); a missing one is a skip,
which KVTIER_REQUIRE_RESOURCES=1 (CI) turns into a failure.
"""

import subprocess
import sys

import pytest

from test_vllm_e2e import HERE, MAX_TOKENS, connector, pages, pytestmark, run  # noqa: F401

PREFIX = 64  # Tokens the two prompts share.


def prompts():
    """Two prompts sharing a PREFIX-token prefix, 90 and 110 tokens; byte tokens."""
    import random

    rng = random.Random(23)
    prefix = [rng.randrange(3, 259) for _ in range(PREFIX)]
    return [{"tokens": prefix + [rng.randrange(3, 259) for _ in range(n)]} for n in (26, 46)]


def page_tokens(dump):
    """Tokens per page in a run's page dump: a layer is [pages, (1,) page_tokens, latent]."""
    return int(dump["layers"][0].shape[-2])


def first_row_difference(expected, got, tokens):
    """None when the first `tokens` latent rows of a prompt are equal in two dumps in every
    layer; otherwise the first layer, token and byte where they differ."""
    import torch

    assert expected["tokens"][:tokens] == got["tokens"][:tokens], "dumps of different prompts"
    for layer, (a, b) in enumerate(zip(expected["layers"], got["layers"])):
        assert a.shape[-1] == 576 and a.numel() % (a.shape[-2] * 576) == 0, list(a.shape)
        x = a.reshape(-1, a.shape[-1])[:tokens].contiguous().view(torch.uint8)
        y = b.reshape(-1, b.shape[-1])[:tokens].contiguous().view(torch.uint8)
        if not torch.equal(x, y):
            token, byte = (x != y).nonzero()[0].tolist()
            return f"layer {layer}, token {token}, byte {byte} of its latent row"
    return None


@pytest.fixture(scope="module")
def mla(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm_mla")
    model = tmp / "model"
    subprocess.run([sys.executable, str(HERE / "make_model.py"), str(model), "--arch",
                    "deepseek_v2", "--layers", "2"], check=True, capture_output=True)
    state = {"tmp": tmp, "model": model, "prompts": prompts(), "cache": tmp / "cache"}
    state["baseline"] = run(model, tmp, "baseline", state["prompts"],
                            connector({"kvtier": False}))
    state["baseline_pages"] = pages(tmp, "baseline")
    assert len(state["baseline_pages"]) == len(state["prompts"])
    state["page"] = page_tokens(state["baseline_pages"][0])
    assert state["page"] in (16, 32) and PREFIX % state["page"] == 0, \
        f"vLLM's MLA pages of {state['page']} tokens: the shared prefix is not whole pages"
    assert all(len(o) == MAX_TOKENS for o in state["baseline"])
    return state


def kvtier_config(state):
    return {"host_bytes": 32 << 20, "ssd_dirs": [str(state["cache"])], "ssd_bytes": 64 << 20,
            "ssd_segment_bytes": 4 << 20}


def test_1_store_latent_pages(mla):
    tmp, ps, base = mla["tmp"], mla["prompts"], mla["baseline_pages"]
    out = run(mla["model"], tmp, "store", ps, connector(kvtier_config(mla)))
    assert out == mla["baseline"]
    log = (tmp / "store.log").read_text()
    assert "latent layout" in log and "kind=latent" in log, \
        "the connector's startup line does not name the latent layout"
    got = pages(tmp, "store")
    mla["store_pages"] = got
    assert got[0]["loaded"] is None
    n0 = len(ps[0]["tokens"])
    diff = first_row_difference(base[0], got[0], n0)
    assert diff is None, f"prompt 0 computed while kvtier stores differs from the baseline: {diff}"
    # The shared prefix (its whole pages) came from the host tier: prompt 0's rows.
    assert page_tokens(got[0]) == mla["page"]
    assert got[1]["loaded"] == [0, PREFIX // mla["page"]] and not got[1]["failed"], \
        got[1]["loaded"]
    diff = first_row_difference(got[0], got[1], PREFIX)
    assert diff is None, f"prompt 1's prefix loaded from the host tier differs: {diff}"


def test_2_load_after_restart(mla):
    tmp, ps, base = mla["tmp"], mla["prompts"], mla["baseline_pages"]
    stored = mla.get("store_pages")
    assert stored is not None, "test_1_store_latent_pages did not run"
    out = run(mla["model"], tmp, "load", ps, connector(kvtier_config(mla)))
    got = pages(tmp, "load")
    for i, p in enumerate(ps):
        loadable = len(p["tokens"]) - 1  # vLLM computes the last prompt token itself.
        assert got[i]["loaded"] == [0, -(-loadable // mla["page"])] and not got[i]["failed"], \
            (i, got[i]["loaded"])
        diff = first_row_difference(stored[i], got[i], loadable)
        assert diff is None, f"prompt {i} loaded from the SSD tier differs from the stored: {diff}"
    diff = first_row_difference(base[0], got[0], len(ps[0]["tokens"]) - 1)
    assert diff is None, f"prompt 0 loaded from the SSD tier differs from the baseline: {diff}"
    assert out == mla["baseline"]
