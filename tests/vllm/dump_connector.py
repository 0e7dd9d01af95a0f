"""A test-only KvtierConnector that writes each prompt's KV pages to a file, so that a test can
compare, byte for byte, the pages vLLM computed with the pages kvtier loaded. Not part of the
package.

kv_connector_extra_config adds:
  dump_dir   where the pages go: one file per request, <NNN>.pt in the order the requests'
             prompts complete (torch.save of {"tokens", "loaded", "failed", "layers", "groups",
             "window_loaded"}: the prompt's tokens (those of every page that holds one, the last
             page maybe in part), the [first, end) chunks kvtier loaded into them (or None),
             whether any loaded page was reported failed, and per layer (kvtier's layer order) the
             tensor of those pages, layer_tensor[pages]; with several KV cache groups "layers"
             are the first group's, "groups" holds {"kind", "window", "layers"} of each group
             (its layers at its own pages; a sliding-window group's pages before its window are
             vLLM's null page) and "window_loaded" {group: [chunks]} the sliding-window chunks
             kvtier loaded). With several tensor-parallel ranks each rank writes its own pages
             (its shard of the heads) under dump_dir/tp<rank>/.
  kvtier     false: kvtier does nothing (no engine, no lookup, no load, no save): the pages are
             vLLM's own computation, with the same connector hooks in place.

The pages are copied at the end of the step that completes the prompt (wait_for_save, after
every layer ran): loaded pages hold exactly what kvtier wrote unless vLLM overwrote them, and
computed pages hold what kvtier gathered to store.
"""

import os

import torch

from kvtier.vllm import _LAYER_INDEX, KvtierConnector, KVConnectorRole


class DumpKvtierConnector(KvtierConnector):
    _EXTRA_CONFIG_KEYS = {"dump_dir": "str", "kvtier": "bool"}

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._kvtier_on = bool(self._config.get("kvtier", True))
        self._dump_dir = self._config["dump_dir"]
        if role == KVConnectorRole.SCHEDULER:
            self._dumped: set[str] = set()
        else:
            self._dump_seq = 0
            self._tensors = {}
            self._loaded: dict[str, tuple] = {}

    # ------------------------------------------------------------------ scheduler side

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        if self._kvtier_on:
            return super().get_num_new_matched_tokens(request, num_computed_tokens)
        self._requests[request.request_id] = request
        return 0, False

    def build_connector_meta(self, scheduler_output):
        meta = super().build_connector_meta(scheduler_output)
        if not self._kvtier_on:
            meta.loads, meta.saves = [], []
        meta.dumps = []
        bs = self._block_size
        steps = [(r.req_id, r.num_computed_tokens) for r in scheduler_output.scheduled_new_reqs]
        cached = scheduler_output.scheduled_cached_reqs
        steps += list(zip(cached.req_ids, cached.num_computed_tokens))
        for req_id, computed in steps:
            request = self._requests.get(req_id)
            if request is None or req_id in self._dumped:
                continue
            prompt = list(request.prompt_token_ids or [])
            if computed + scheduler_output.num_scheduled_tokens.get(req_id, 0) < len(prompt):
                continue
            self._dumped.add(req_id)
            chunks = -(-len(prompt) // bs)
            meta.dumps.append((req_id, prompt, [p[:chunks] for p in self._blocks[req_id]]))
        return meta

    def request_finished(self, request, block_ids):
        self._dumped.discard(request.request_id)
        return super().request_finished(request, block_ids)

    # ------------------------------------------------------------------ worker side

    def register_kv_caches(self, kv_caches):
        if self._kvtier_on:
            super().register_kv_caches(kv_caches)
        else:
            def order(name):
                m = _LAYER_INDEX.search(name)
                return (int(m.group(1)) if m else 0, name)

            members = self._group_members(sorted(kv_caches, key=order))
            for group, names in enumerate(members):
                for i, name in enumerate(names):
                    self._layer_index[name], self._layer_group[name] = i, group
        self._tensors = {name: kv_caches[name] for name in self._layer_index}

    def start_load_kv(self, forward_context, **kwargs):
        if self.has_connector_metadata():
            for op in self._get_connector_metadata().loads:
                record = self._loaded.setdefault(op.req_id, {"prefix": None, "window": {}})
                if op.at >= 0:
                    record["window"].setdefault(op.group, []).append(op.at)
                    record.setdefault("pages", []).extend(op.pages)
                elif record["prefix"] is None:
                    record["prefix"] = (op.first_chunk, op.chunks)
                    record.setdefault("pages", []).extend(op.pages[op.first_chunk:op.chunks])
                else:
                    record.setdefault("pages", []).extend(op.pages[op.first_chunk:op.chunks])
        super().start_load_kv(forward_context, **kwargs)

    def _rank_dump_dir(self) -> str:
        if self._tp_size <= 1:
            return self._dump_dir
        from vllm.distributed import get_tensor_model_parallel_rank
        path = os.path.join(self._dump_dir, f"tp{get_tensor_model_parallel_rank()}")
        os.makedirs(path, exist_ok=True)
        return path

    def wait_for_save(self):
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        super().wait_for_save()
        if meta is None:
            return
        names = sorted(self._tensors, key=lambda n: (self._layer_group[n], self._layer_index[n]))
        for req_id, tokens, pages in getattr(meta, "dumps", []):
            loaded = self._loaded.pop(req_id, None)
            failed = loaded is not None and bool(set(loaded.get("pages", [])) &
                                                 self._failed_pages)
            groups = []
            for group in self._groups:
                index = torch.tensor(pages[group.index], dtype=torch.long)
                groups.append({"kind": group.kind, "window": group.window, "layers": [
                    self._tensors[n][index].clone() for n in names
                    if self._layer_group[n] == group.index]})
            prefix = None if loaded is None or loaded["prefix"] is None else loaded["prefix"]
            record = {"tokens": tokens, "loaded": None if prefix is None else list(prefix),
                      "failed": failed, "layers": groups[0]["layers"], "groups": groups,
                      "window_loaded": {} if loaded is None else loaded["window"]}
            path = os.path.join(self._rank_dump_dir(), f"{self._dump_seq:03d}.pt")
            torch.save(record, path + ".tmp")
            os.replace(path + ".tmp", path)
            self._dump_seq += 1
