"""KvtierConnector's scheduler side with several KV cache groups (vLLM's hybrid KV cache manager).

Goal: with a full-attention and a sliding-window group, each group is stored and looked up in a
namespace of its own; the full-attention group stores every chunk of a prompt and the
sliding-window group only the chunks of the window before the prompt's end; a hit loads every
chunk of the full-attention group and only the window's chunks of the sliding-window group, into
that group's own pages; a hit is taken only when every group has what it needs (a missing window
chunk is a miss); a model with a single sliding-window group is served from its windows alone;
a model with state-space layers (vLLM's MambaSpec) or another unknown layer type is refused at
startup with a message naming the type; groups of different layer counts are refused when the
worker registers its layers.

Method: the connector's scheduler role on test_connector_safety.py's stand-in vllm_config, given
a kv_cache_config made of vLLM's own spec classes (no vLLM engine runs); the worker's lookup server
answers from a stub that knows exactly the chunks the scheduler's saves would store (namespace
and key tokens), so a lookup finds what a store put there and nothing else.
"""

from types import SimpleNamespace

import pytest

# pytestmark: skipped (a failure in CI) without vLLM, as every test here.
from test_connector_safety import BLOCK, make_config, pytestmark  # noqa: F401

WINDOW = 2 * BLOCK
PROMPT = 7 * BLOCK + 6  # 7 whole chunks and a partial one of 6 tokens


def specs():
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    common = dict(block_size=BLOCK, num_kv_heads=4, head_size=64, dtype=torch.bfloat16)
    return FullAttentionSpec(**common), SlidingWindowSpec(**common, sliding_window=WINDOW)


def kv_cache_config(*group_specs):
    return SimpleNamespace(kv_cache_groups=[
        SimpleNamespace(kv_cache_spec=spec, layer_names=[f"model.layers.{2 * i + g}.attn"
                                                         for i in range(2)])
        for g, spec in enumerate(group_specs)])


def scheduler(tmp_path, config):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from kvtier.vllm import KvtierConnector

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    return KvtierConnector(make_config({"runtime_dir": str(runtime)}), KVConnectorRole.SCHEDULER,
                           config)


class Store:
    """What the saves stored: (salt, extra keys, key tokens of each chunk) -> cached; a lookup
    matches the stored prefix of its tokens, chunk by chunk, as kvtier does."""

    def __init__(self):
        self.chunks = set()

    @staticmethod
    def _keys(salt, extra, tokens):
        return [(salt, tuple(extra), tuple(tokens[:(c + 1) * BLOCK]))
                for c in range(len(tokens) // BLOCK)]

    def save(self, op):
        for key in self._keys(op.ns[0], op.ns[1], op.tokens)[op.first_chunk:op.chunks]:
            self.chunks.add(key)

    def lookup(self, request):
        matched = 0
        for key in self._keys(request["salt"], request["extra"], request["tokens"]):
            if key not in self.chunks:
                break
            matched += BLOCK
        return matched


def pages(group, chunks):
    """Distinct page ids per group (one block pool: a page belongs to one group)."""
    return list(range(100 * (group + 1), 100 * (group + 1) + chunks))


def prompt_request(req_id, n=PROMPT):
    return SimpleNamespace(request_id=req_id, prompt_token_ids=[3 + i % 250 for i in range(n)],
                           cache_salt=None, lora_request=None)


def step(req, groups, computed=0):
    chunks = -(-len(req.prompt_token_ids) // BLOCK)
    new = SimpleNamespace(req_id=req.request_id, num_computed_tokens=computed,
                          block_ids=tuple(pages(g, chunks) for g in range(groups)))
    cached = SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[],
                             resumed_req_ids=set())
    return SimpleNamespace(scheduled_new_reqs=[new], scheduled_cached_reqs=cached,
                           num_scheduled_tokens={req.request_id: len(req.prompt_token_ids) -
                                                 computed})


class Blocks:
    def __init__(self, groups, chunks):
        self.ids = tuple(pages(g, chunks) for g in range(groups))

    def get_block_ids(self):
        return self.ids


def run_request(conn, req, groups):
    """One request through the scheduler hooks: (hit tokens, LoadOps, SaveOps)."""
    hit, _ = conn.get_num_new_matched_tokens(req, 0)
    chunks = -(-len(req.prompt_token_ids) // BLOCK)
    conn.update_state_after_alloc(req, Blocks(groups, chunks), hit)
    meta = conn.build_connector_meta(step(req, groups, hit))
    conn.request_finished_all_groups(req, ())
    return hit, meta.loads, meta.saves


@pytest.fixture
def hybrid(tmp_path):
    from test_connector_safety import start_server

    conn = scheduler(tmp_path, kv_cache_config(*specs()))
    store = Store()
    server = start_server(conn, store.lookup)
    yield conn, store
    server.close()


def by_group(ops):
    out = {}
    for op in ops:
        out.setdefault(op.group, []).append(op)
    return out


def test_each_group_stores_in_its_own_namespace_the_window_only_for_sliding(hybrid):
    conn, store = hybrid
    hit, loads, saves = run_request(conn, prompt_request("a"), 2)
    assert hit == 0 and not loads
    groups = by_group(saves)
    full, = groups[0]
    assert (full.first_chunk, full.chunks, full.pages) == (0, 8, pages(0, 8)) and full.at == -1
    # The window before the last prompt token (229) and before the last chunk boundary (224)
    # starts in chunk (224 - 63) // 32 = 5: chunks 5, 6 and the partial 7, one op each.
    assert [(op.at, op.pages, op.chunks, op.tail_tokens) for op in groups[1]] == [
        (5, [205], 1, 0), (6, [206], 1, 0), (7, [207], 1, 6)]
    assert full.ns != groups[1][0].ns and full.ns[0] == groups[1][0].ns[0]
    assert "kv_group:0:full" in full.ns[1] and f"kv_group:1:sliding:{WINDOW}" in groups[1][0].ns[1]
    assert len({tuple(op.tokens) for op in groups[1]}) == 3


def test_a_hit_loads_every_full_chunk_and_the_window_chunks_only(hybrid):
    conn, store = hybrid
    for op in run_request(conn, prompt_request("a"), 2)[2]:
        store.save(op)
    hit, loads, saves = run_request(conn, prompt_request("b"), 2)
    assert hit == PROMPT - 1
    groups = by_group(loads)
    full, = groups[0]
    assert (full.first_chunk, full.chunks, full.pages, full.hit_tokens) == (0, 8, pages(0, 8),
                                                                           PROMPT - 1)
    # Token 229's window: tokens 166..228, chunks 5..7.
    assert [(op.at, op.pages, op.first_chunk, op.chunks) for op in groups[1]] == [
        (c, [200 + c], 0, 1) for c in (5, 6, 7)]
    assert not saves  # Everything is cached.
    # A conversation's next turn: the prompt and 40 more tokens hits the 7 whole chunks.
    hit, loads, _ = run_request(conn, prompt_request("c", PROMPT + 40), 2)
    assert hit == 7 * BLOCK
    assert [op.at for op in by_group(loads)[1]] == [5, 6]


def test_a_missing_window_chunk_is_a_miss(hybrid):
    conn, store = hybrid
    for op in run_request(conn, prompt_request("a"), 2)[2]:
        if op.at != 6:  # The sliding-window group's chunk 6 is lost.
            store.save(op)
    hit, loads, _ = run_request(conn, prompt_request("b"), 2)
    assert hit == 0 and not loads


def test_a_model_windowed_in_every_layer_hits_from_its_windows(tmp_path):
    from test_connector_safety import start_server

    conn = scheduler(tmp_path, kv_cache_config(specs()[1]))
    store = Store()
    server = start_server(conn, store.lookup)
    try:
        saves = run_request(conn, prompt_request("a"), 1)[2]
        assert [op.at for op in saves] == [5, 6, 7]
        assert all("kv_group:0:sliding:64" not in op.ns[1] for op in saves)  # One group: no key
        for op in saves:
            store.save(op)
        hit, loads, _ = run_request(conn, prompt_request("b"), 1)
        assert hit == PROMPT - 1 and [op.at for op in loads] == [5, 6, 7]
    finally:
        server.close()


def test_state_space_layers_are_refused_at_startup(tmp_path):
    import torch
    from vllm.v1.kv_cache_interface import MambaSpec

    mamba = MambaSpec(block_size=BLOCK, shapes=((4, 64),), dtypes=(torch.bfloat16,))
    with pytest.raises(RuntimeError, match=r"group 1 has layers of type MambaSpec .*"
                                           r"state-space or linear-attention"):
        scheduler(tmp_path, kv_cache_config(specs()[0], mamba))


def test_an_unknown_layer_type_is_refused_naming_it(tmp_path):
    class ChunkedLocalAttentionSpec:
        block_size = BLOCK

    with pytest.raises(RuntimeError, match="type ChunkedLocalAttentionSpec"):
        scheduler(tmp_path, kv_cache_config(specs()[0], ChunkedLocalAttentionSpec()))


def test_groups_of_different_layer_counts_are_refused(tmp_path):
    full, sliding = specs()
    config = SimpleNamespace(kv_cache_groups=[
        SimpleNamespace(kv_cache_spec=full, layer_names=["model.layers.1.attn",
                                                         "model.layers.3.attn"]),
        SimpleNamespace(kv_cache_spec=sliding, layer_names=["model.layers.0.attn"])])
    conn = scheduler(tmp_path, config)
    names = [f"model.layers.{i}.attn" for i in range(4)]
    with pytest.raises(RuntimeError, match=r"different layer counts \(group 0: 2, group 1: 1\)"):
        conn._group_members(names)
