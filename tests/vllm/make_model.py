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

  python tests/vllm/make_model.py OUT_DIR [--shape tiny|tinyllama-1.1b] [--layers N]
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
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--layers", type=int, help="override the shape's layer count")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(args.out_dir, exist_ok=True)
    make_tokenizer(args.out_dir)
    shape = dict(SHAPES[args.shape])
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    config = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=16384, rms_norm_eps=1e-5,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                         torch_dtype="bfloat16", **shape)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    # Larger than the default init so that attention is not uniform and the KV matters: a
    # changed K or V changes the greedy tokens (the canary test relies on it).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08 if "embed" not in name else EMBED_STD)
        make_decisive(model, args.seed)
    model.to(torch.bfloat16).save_pretrained(args.out_dir, safe_serialization=True)
    with open(os.path.join(args.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, f)
    print(f"make_model: {args.shape} ({shape['num_hidden_layers']} layers) in {args.out_dir}")


if __name__ == "__main__":
    sys.exit(main())
