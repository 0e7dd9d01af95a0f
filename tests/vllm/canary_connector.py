"""A test-only KvtierConnector whose loads are deliberately altered: after each layer arrives,
every loaded page of that layer gets noise added. The end-to-end test runs it to prove that vLLM's
attention really reads the KV kvtier loads (altered KV must change the greedy tokens), so the
"same tokens as the baseline" check cannot pass by recomputing. Not part of the package.
"""

import torch

from kvtier.vllm import KvtierConnector


class CanaryKvtierConnector(KvtierConnector):
    def register_kv_caches(self, kv_caches):
        super().register_kv_caches(kv_caches)
        self._tensors = {name: kv_caches[name] for name in self._layer_index}

    def wait_for_layer_load(self, layer_name):
        super().wait_for_layer_load(layer_name)
        tensor = self._tensors.get(layer_name)
        if tensor is None:
            return
        generator = torch.Generator().manual_seed(7)
        for op, _ in self._active_loads:
            pages = torch.tensor(op.pages[op.first_chunk:], dtype=torch.long)
            noise = torch.randn(tensor[pages].shape, generator=generator).to(tensor.dtype)
            tensor[pages] += noise
