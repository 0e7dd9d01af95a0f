#!/usr/bin/env python3
"""A vLLM-style KV connector driving kvtier, end to end, without vLLM.

The no-vLLM fallback: for vLLM itself use kvtier.vllm.KvtierConnector (docs/integration.md,
"vLLM: KvtierConnector"); this example shows the same hooks for other paged-attention engines, and
runs where vLLM is not installed.

A paged-attention engine keeps, per layer, a pool of KV pages; a request owns a list of page ids.
With page size == kvtier's block_tokens, one page of one layer is exactly one kvtier block in the
canonical layout [k|v][token][kv_head][head_dim], so kvtier loads into and stores from the pages
themselves: no staging copy.

The connector is split the way vLLM splits it:

  scheduler side (one process, no KV memory)
    get_num_new_matched_tokens(request)  -> kvtier lookup: how many prompt tokens are cached
    update_state_after_alloc(request, page_ids, n) -> remember which pages to fill
    build_connector_meta()               -> the step's load/save work, handed to the workers
    request_waiting(request)             -> kvtier prefetch (warm SSD chunks into host memory)

  worker side (owns the paged KV)
    start_load_kv(meta)      -> one kvtier load per request, straight into the pages
    wait_for_layer_load(l)   -> LoadHandle.wait_layer(l) before layer l's attention runs
    save_kv_layer(l, meta)   -> collect layer l's pages; after the last layer, one kvtier store
    wait_for_save()          -> StoreHandle.wait(): pages may be reused afterwards

The "model" here writes a deterministic function of (layer, token prefix) into each page, so the
example checks that what kvtier loads is bit-identical to what prefill would have computed.
Run: PYTHONPATH=<build>/python python3 examples/vllm_style_connector.py [--cache-dir DIR]
"""

import argparse
import dataclasses
import hashlib
import tempfile
import time

import numpy as np

import kvtier

LAYERS, KV_HEADS, HEAD_DIM, PAGE_TOKENS = 4, 2, 32, 16
LAYOUT = dict(layers=LAYERS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, dtype="f16",
              block_tokens=PAGE_TOKENS)


@dataclasses.dataclass
class Request:
    request_id: str
    prompt: list
    tenant: str = "default"
    page_ids: list = dataclasses.field(default_factory=list)
    num_external_tokens: int = 0  # Prompt tokens kvtier will provide.


@dataclasses.dataclass
class ConnectorMeta:
    """What the scheduler tells the workers for one step."""
    loads: list = dataclasses.field(default_factory=list)  # (request, tokens to load)
    saves: list = dataclasses.field(default_factory=list)  # (request, tokens to save)


class KvtierSchedulerConnector:
    def __init__(self, engine):
        self.engine = engine
        self.pending = ConnectorMeta()

    def namespace(self, request):
        return self.engine.make_namespace(salt=request.tenant)

    def request_waiting(self, request):
        # Between requests: promote whatever is cached for this prompt towards host memory.
        self.engine.prefetch(self.namespace(request), request.prompt)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        hit = self.engine.lookup(self.namespace(request), request.prompt).matched_tokens
        # Leave at least one token to compute, as an engine must produce logits for it.
        if hit == len(request.prompt):
            hit -= PAGE_TOKENS
        return max(0, hit - num_computed_tokens)

    def update_state_after_alloc(self, request, page_ids, num_external_tokens):
        request.page_ids = page_ids
        request.num_external_tokens = num_external_tokens
        if num_external_tokens:
            self.pending.loads.append((request, num_external_tokens))
        full = len(request.prompt) // PAGE_TOKENS * PAGE_TOKENS
        if full:
            self.pending.saves.append((request, full))

    def build_connector_meta(self):
        meta, self.pending = self.pending, ConnectorMeta()
        return meta


class KvtierWorkerConnector:
    def __init__(self, engine, kv_pages):
        self.engine = engine
        self.kv_pages = kv_pages  # Per layer: [pages, 2, PAGE_TOKENS, KV_HEADS, HEAD_DIM]
        self.loads = []
        self.saves = []
        self.save_pages = {}

    def _blocks(self, request, tokens):
        """Page views indexed [chunk * layers + layer]: kvtier's block order."""
        chunks = tokens // PAGE_TOKENS
        return [self.kv_pages[layer][request.page_ids[c]]
                for c in range(chunks) for layer in range(LAYERS)]

    def start_load_kv(self, meta):
        for request, tokens in meta.loads:
            ns = self.engine.make_namespace(salt=request.tenant)
            self.loads.append(self.engine.load(ns, request.prompt[:tokens],
                                               self._blocks(request, tokens)))

    def wait_for_layer_load(self, layer):
        for load in self.loads:
            load.wait_layer(layer)

    def finish_loads(self):
        for load in self.loads:
            load.close()
        self.loads = []

    def save_kv_layer(self, layer, meta):
        # kvtier stores every layer of a chunk together (a chunk is visible only when complete),
        # so the layers are collected and handed over after the last one.
        if layer == LAYERS - 1:
            for request, tokens in meta.saves:
                ns = self.engine.make_namespace(salt=request.tenant)
                self.saves.append(self._store(ns, request.prompt[:tokens],
                                              self._blocks(request, tokens)))

    def _store(self, ns, tokens, blocks):
        # BusyError: the memory tiers hold only pinned blocks, or dirty ones that the engine's
        # cleaner is still writing back to the SSD; the latter free up, so try again for a while.
        for _ in range(2000):
            try:
                return self.engine.store(ns, tokens, blocks)
            except kvtier.BusyError:
                time.sleep(0.005)
        return self.engine.store(ns, tokens, blocks)

    def wait_for_save(self):
        for store in self.saves:
            store.wait()
            store.close()
        self.saves = []


def computed_kv(layer, prefix_tokens):
    """The 'model': K and V of the last PAGE_TOKENS tokens of a prefix, deterministic."""
    digest = hashlib.sha256(np.asarray(prefix_tokens, np.uint32).tobytes() + bytes([layer]))
    rng = np.random.default_rng(int.from_bytes(digest.digest()[:8], "little"))
    return rng.standard_normal((2, PAGE_TOKENS, KV_HEADS, HEAD_DIM)).astype(np.float16)


class PagedEngine:
    """A toy paged-attention engine: allocates pages, runs prefill layer by layer."""

    def __init__(self, kv_engine, pages=64):
        self.kv_pages = [np.zeros((pages, 2, PAGE_TOKENS, KV_HEADS, HEAD_DIM), np.float16)
                         for _ in range(LAYERS)]
        self.free_pages = list(range(pages))
        self.scheduler = KvtierSchedulerConnector(kv_engine)
        self.worker = KvtierWorkerConnector(kv_engine, self.kv_pages)
        self.recomputed_pages = 0

    def step(self, request):
        """Schedules and prefills one request; returns the number of prompt tokens loaded."""
        external = self.scheduler.get_num_new_matched_tokens(request, 0)
        pages = [self.free_pages.pop() for _ in range(-(-len(request.prompt) // PAGE_TOKENS))]
        self.scheduler.update_state_after_alloc(request, pages, external)
        meta = self.scheduler.build_connector_meta()

        self.worker.start_load_kv(meta)
        for layer in range(LAYERS):
            self.worker.wait_for_layer_load(layer)
            # "Attention" for this layer: loaded pages must equal what prefill computes...
            for chunk in range(external // PAGE_TOKENS):
                expected = computed_kv(layer, request.prompt[:(chunk + 1) * PAGE_TOKENS])
                got = self.kv_pages[layer][pages[chunk]]
                assert np.array_equal(got, expected), (request.request_id, layer, chunk)
            # ...and prefill computes the rest (the partial last page included).
            for chunk in range(external // PAGE_TOKENS, len(pages)):
                end = min((chunk + 1) * PAGE_TOKENS, len(request.prompt))
                kv = computed_kv(layer, request.prompt[:end])
                self.kv_pages[layer][pages[chunk]] = kv
                self.recomputed_pages += 1
            self.worker.save_kv_layer(layer, meta)
        self.worker.finish_loads()
        self.worker.wait_for_save()
        return external

    def finish(self, request):
        self.free_pages.extend(request.page_ids)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", help="SSD tier directory (default: a temporary one)")
    args = parser.parse_args()
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="kvtier_connector_")

    # A host tier of 64 blocks: the second document's chunks push the first one's down to SSD.
    engine = kvtier.Engine(layout=LAYOUT, host_bytes=64 * 2 * PAGE_TOKENS * KV_HEADS * HEAD_DIM * 2,
                           ssd_dirs=[cache_dir], ssd_bytes=32 << 20, ssd_segment_bytes=1 << 20,
                           write_policy="back", model_name="toy-llama")
    paged = PagedEngine(engine)
    system_prompt = list(range(5000, 5000 + 80))  # 5 full pages shared by every request.

    first = Request("a", system_prompt + [1, 2, 3, 4, 5, 6, 7])
    assert paged.step(first) == 0
    paged.finish(first)

    # A second user with the same system prompt: its 80 leading tokens come from kvtier.
    second = Request("b", system_prompt + list(range(9000, 9040)))
    paged.scheduler.request_waiting(second)
    loaded = paged.step(second)
    assert loaded == 80, loaded
    paged.finish(second)

    # Another tenant never sees those blocks.
    other = Request("c", system_prompt + [42], tenant="other-tenant")
    assert paged.step(other) == 0
    paged.finish(other)

    # Fill host memory with unrelated documents, then come back: the prefix is served from SSD.
    for doc in range(4):
        filler = Request(f"filler-{doc}", list(range(20000 + 1000 * doc, 20000 + 1000 * doc + 160)))
        paged.step(filler)
        paged.finish(filler)
    engine.flush()
    again = Request("d", system_prompt + [99] * 20)
    where = engine.lookup(engine.make_namespace(salt=again.tenant), again.prompt).chunk_tiers
    print("shared prefix before prefetch:", [tier.name for tier in where])
    paged.scheduler.request_waiting(again)
    assert paged.step(again) == 80
    paged.finish(again)

    stats = engine.stats()
    tiers = {t.kind.name: t.blocks for t in stats.tiers}
    print(f"lookups={stats.lookups} hit_tokens={stats.lookup_hit_tokens} "
          f"loaded_blocks={stats.load_blocks} stored_blocks={stats.store_blocks} "
          f"recomputed_pages={paged.recomputed_pages} tiers={tiers}")
    engine.close()
    print("vllm_style_connector: OK")


if __name__ == "__main__":
    main()
