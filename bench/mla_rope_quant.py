#!/usr/bin/env python3
"""Measures what quantizing a multi-head latent attention (MLA) cache would cost, part by part:
the compressed KV (the first kv_lora_rank elements of each token's latent row) against the rope
key (the last qk_rope_head_dim elements), so that a latent codec can decide whether to keep the
rope part exact.

The quantization is the int8/int4 scheme of docs/codecs.md in F32 (without the FP16 rounding of
scales and zero points), which moves the figures by far less than their differences.

Input: page dumps of tests/vllm/dump_connector.py from an MLA model (torch.save'd records whose
"layers" are [pages, page_tokens, latent] tensors), e.g. the baseline of tests/vllm/test_vllm_mla.py
(pytest --basetemp=DIR keeps them under DIR/vllm_mla0/baseline.pages). Each token's row is
quantized as kvtier's INT8/INT4 codecs quantize a value row (asymmetric min/max per group of
`--group` consecutive elements along the row, round to nearest; docs/codecs.md), groups never
straddling the rope boundary when the group size divides kv_lora_rank. Reported per part and bit
width: the relative RMSE (RMSE of the error over the RMS of the values) and the relative error of
the rope part's contribution to an attention logit, q_rope . k_rope, for random unit queries.

  python bench/mla_rope_quant.py DUMP.pt... [--rope 64] [--group 32] [--json]
"""

import argparse
import json
import sys


def quantize(rows, bits, group):
    import torch

    n, width = rows.shape
    pad = (-width) % group
    x = torch.nn.functional.pad(rows, (0, pad)).view(n, -1, group)
    lo, hi = x.amin(dim=2, keepdim=True), x.amax(dim=2, keepdim=True)
    levels = (1 << bits) - 1
    scale = torch.where(hi > lo, (hi - lo) / levels, torch.ones_like(hi))
    q = torch.clamp(torch.round((x - lo) / scale), 0, levels)
    return (q * scale + lo).view(n, -1)[:, :width]


def rel_rmse(x, y):
    return float(((x - y).pow(2).mean().sqrt() / x.pow(2).mean().sqrt().clamp_min(1e-30)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+")
    parser.add_argument("--rope", type=int, default=64, help="qk_rope_head_dim")
    parser.add_argument("--group", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch

    rows = []
    for path in args.dumps:
        record = torch.load(path)
        n = len(record["tokens"])  # Rows after the prompt's tokens are not KV.
        for layer in record["layers"]:
            rows.append(layer.reshape(-1, layer.shape[-1])[:n].float())
    rows = torch.cat(rows)
    rank = rows.shape[1] - args.rope
    queries = torch.nn.functional.normalize(
        torch.randn(64, args.rope, generator=torch.Generator().manual_seed(7)), dim=1)
    report = {"tokens": rows.shape[0], "kv_lora_rank": rank, "rope": args.rope,
              "group": args.group,
              "rms": {"latent": float(rows[:, :rank].pow(2).mean().sqrt()),
                      "rope": float(rows[:, rank:].pow(2).mean().sqrt())}}
    for bits in (8, 4):
        deq = quantize(rows, bits, args.group)
        exact = rows[:, rank:] @ queries.T
        approx = deq[:, rank:] @ queries.T
        report[f"int{bits}"] = {
            "latent_rel_rmse": rel_rmse(rows[:, :rank], deq[:, :rank]),
            "rope_rel_rmse": rel_rmse(rows[:, rank:], deq[:, rank:]),
            "rope_logit_rel_rmse": rel_rmse(exact, approx),
        }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['tokens']} latent rows of {rank} + rope {args.rope}, groups of "
              f"{args.group}; RMS latent {report['rms']['latent']:.3f}, rope "
              f"{report['rms']['rope']:.3f}")
        for bits in (8, 4):
            r = report[f"int{bits}"]
            print(f"int{bits}: latent rel. RMSE {r['latent_rel_rmse']:.4f}, rope rel. RMSE "
                  f"{r['rope_rel_rmse']:.4f}, rope logit rel. RMSE {r['rope_logit_rel_rmse']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
