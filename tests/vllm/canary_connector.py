"""A test-only KvtierConnector whose loads are deliberately altered: after each layer arrives,
every loaded page of that layer gets large noise added (standard deviation 64, far above the
model's K and V). The end-to-end test runs it to prove that vLLM's attention really reads the KV
kvtier loads (altered KV must change the greedy tokens of the decisive test model, and the pages
dumped after the step must differ from what was stored), so the "same tokens, same bytes as the
baseline" checks cannot pass by recomputing. It dumps pages like DumpKvtierConnector. Not part of
the package.
"""

import torch

from dump_connector import DumpKvtierConnector

NOISE_STD = 64.0


class CanaryKvtierConnector(DumpKvtierConnector):
    def wait_for_layer_load(self, layer_name):
        super().wait_for_layer_load(layer_name)
        tensor = self._tensors.get(layer_name)
        if tensor is None:
            return
        generator = torch.Generator().manual_seed(7)
        for op, _ in self._active_loads:
            pages = torch.tensor(op.pages[op.first_chunk:], dtype=torch.long)
            noise = torch.randn(tensor[pages].shape, generator=generator) * NOISE_STD
            tensor[pages] += noise.to(tensor.dtype)
