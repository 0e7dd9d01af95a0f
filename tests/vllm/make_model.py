#!/usr/bin/env python3
"""Makes a small Llama with random weights, in Hugging Face format, with a local tokenizer.

The end-to-end vLLM tests and bench/vllm_ttft.py need a model that vLLM loads like any other,
without a download: this writes config.json, model.safetensors (seeded random weights, so two
runs give the same model) and a byte-level tokenizer (tokenizer.json: one token per byte, no
merges, so any text round-trips and the prompt length in tokens is its length in bytes).

The model is decisive: a plain random model has nearly flat logits (top-1 and top-2 within 0.01
of each other at some steps of the test prompts), so any change in rounding (a kernel chosen for
another batch or chunk shape, another CPU's instructions) flips a greedy token, and a token check
on it cannot tell rounding from wrong KV. Here each byte token's embedding is large (standard
deviation 4, against the layers' outputs of about 1) and the output head has, for each byte token
t, a strong row for a fixed successor perm(t) along t's embedding: the top-1 logit leads by more
than 10 at every step of the tests' prompts, while attention still moves every logit (altered KV
changes the tokens). The tests check the margin of every generated token (run_vllm.py reports
it), so a model that is not decisive enough fails loudly instead of flipping a token.

With --arch deepseek_v2 it writes a DeepSeek-V2-architecture model instead (multi-head latent
attention: the KV cache holds one latent vector per token and layer, kv_lora_rank + qk_rope_head_dim
elements, no K/V split), with dense MLPs only (no experts) and the same byte tokenizer and decisive
head. vLLM's CPU MLA kernel takes only kv_lora_rank 512 with a rope part of 64, so those two are
DeepSeek-V2's own; everything else is small.

With --arch gemma3 it writes a Gemma-3-architecture text model (Gemma3ForCausalLM) whose layers
alternate sliding-window attention (a window of SLIDING_WINDOW tokens) and full attention, so
vLLM's hybrid KV cache manager keeps one KV cache group per attention type; untied output head,
same byte tokenizer and decisive head (Gemma scales the embeddings by sqrt(hidden_size): their
weights are drawn that much smaller, so the layers move the logits as much as in the Llama).

With --arch mamba it writes a Mamba (state-space) model, for the connector's refusal at startup
only: its output head is left random (not decisive), since no tokens of it are compared.

  python tests/vllm/make_model.py OUT_DIR [--arch llama|deepseek_v2|gemma3|mamba]
      [--shape tiny|tinyllama-1.1b] [--layers N] [--sliding-window TOKENS]
"""

import argparse
import json
import os
import sys

SHAPES = {
    # Small enough that vLLM starts in seconds on two cores; vLLM's CPU attention wants
    # head_dim in 32..512 and pages that are multiples of 16 tokens.
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=4),
    # TinyLlama-1.1B's shape: prefill costs seconds on a CPU, as a real model's would.
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4),
}
# DeepSeek-V2's attention on the "tiny" shape's hidden size; the latent (512) and rope (64) sizes
# are the ones vLLM's CPU MLA decode kernel is built for.
MLA = dict(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=32,
           q_lora_rank=None)
# Gemma-3: the sliding-window layers' window, two 32-token pages (the tests' page size).
SLIDING_WINDOW = 64
VOCAB = 512  # 256 byte tokens, <s>, </s>, <unk>, and room.
BYTE_TOKENS = range(3, 259)  # The tokenizer's byte tokens (after <unk>, <s>, </s>).
EMBED_STD = 4.0
SUCCESSOR_WEIGHT = 2.0


def make_tokenizer(out_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.save_pretrained(out_dir)
    return len(vocab)


def make_decisive(model, seed):
    """Adds to the output head's row of perm(t) a unit vector along t's embedding, for each byte
    token t (perm: a seeded permutation of the byte tokens, so no step ends the generation)."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    src = torch.tensor(list(BYTE_TOKENS))
    dst = src[torch.randperm(len(src), generator=generator)]
    embed = model.model.embed_tokens.weight[src]
    model.lm_head.weight[dst] += SUCCESSOR_WEIGHT * embed / embed.norm(dim=1, keepdim=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--arch", choices=["llama", "deepseek_v2", "gemma3", "mamba"],
                        default="llama")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--layers", type=int, help="override the shape's layer count")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sliding-window", type=int, default=SLIDING_WINDOW,
                        help=f"gemma3: the sliding-window layers' window in tokens "
                             f"(default {SLIDING_WINDOW})")
    args = parser.parse_args()

    import torch

    os.makedirs(args.out_dir, exist_ok=True)
    make_tokenizer(args.out_dir)
    shape = dict(SHAPES[args.shape])
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    common = dict(vocab_size=VOCAB, max_position_embeddings=16384, rms_norm_eps=1e-5,
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  torch_dtype="bfloat16", **shape)
    if args.arch == "deepseek_v2":
        from transformers import DeepseekV2Config as Config
        from transformers import DeepseekV2ForCausalLM as Model

        # Every layer dense (first_k_dense_replace = layers): the expert fields are set (the
        # config requires them) but no layer has experts to route.
        config = Config(**common, **MLA, first_k_dense_replace=shape["num_hidden_layers"],
                        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                        moe_intermediate_size=64)
    elif args.arch == "gemma3":
        from transformers import Gemma3ForCausalLM as Model
        from transformers import Gemma3TextConfig as Config

        layers = shape["num_hidden_layers"]
        head_dim = shape["hidden_size"] // shape["num_attention_heads"]
        config = Config(**common, head_dim=head_dim, query_pre_attn_scalar=head_dim,
                        sliding_window=args.sliding_window, pad_token_id=0,
                        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention"
                                     for i in range(layers)])
    elif args.arch == "mamba":
        from transformers import MambaConfig as Config
        from transformers import MambaForCausalLM as Model

        config = Config(vocab_size=VOCAB, hidden_size=shape["hidden_size"], state_size=16,
                        num_hidden_layers=shape["num_hidden_layers"], bos_token_id=1,
                        eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
                        torch_dtype="bfloat16")
    else:
        from transformers import LlamaConfig as Config
        from transformers import LlamaForCausalLM as Model

        config = Config(**common)
    embed_std = EMBED_STD
    if args.arch == "gemma3":  # Gemma multiplies the embeddings by sqrt(hidden_size).
        embed_std /= shape["hidden_size"] ** 0.5
    torch.manual_seed(args.seed)
    model = Model(config)
    # Larger than the default init so that attention is not uniform and the KV matters: a
    # changed K or V changes the greedy tokens (the canary test relies on it).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08 if "embed" not in name else embed_std)
        if args.arch != "mamba":
            make_decisive(model, args.seed)
    model.to(torch.bfloat16).save_pretrained(args.out_dir, safe_serialization=True)
    with open(os.path.join(args.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, f)
    print(f"make_model: {args.arch} {args.shape} ({shape['num_hidden_layers']} layers) in {args.out_dir}")


if __name__ == "__main__":
    sys.exit(main())
