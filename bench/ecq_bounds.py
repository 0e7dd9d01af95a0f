#!/usr/bin/env python3
"""How far a better entropy coder or a transform could take the entropy-coded codecs (ecq5, ecq6,
ecq6v5) on a real model's KV blocks: the bytes each part of a block takes today beside what
ideal coders of the same codes would take.

The blocks are those `kvtier bench codec` measures (its --save-model-kv array: the shared
stories260K model's prefilled KV, 64-token blocks of 4 KV heads of 8, FP16, 8 KiB each). The
script quantizes them as docs/codecs.md ("Entropy-coded quantization") defines ecq, in float32
with the one-pass statistics in token order, and reports per codec, in bytes per block:

- `kvtier_bytes`: the block as kvtier encodes it (raw bytes over `bench codec`'s ratio);
- `header`, `steps`, `centers_raw`: the parts of a block besides its codes;
- `stage_zstd`: the replicated stage through the zstd program (level 1), which must come within
  1 % of kvtier's payload (the check that the replica quantizes as kvtier does);
- `codes_zstd`: the codes alone through the zstd program;
- `codes_one_table`: the codes' order-0 entropy with one table per block (what a Huffman or
  arithmetic coder with one table gets if its table were free);
- `codes_per_channel_model`: each channel's codes coded under a discretized Gaussian with that
  channel's own spread, its side information free (what a static-table coder with a model per
  channel gets at best);
- `codes_temporal`: the same, each channel coding either its codes or their difference from the
  previous token's, whichever is smaller;
- `klt_bits_per_code`: the coding gain of a per-head Karhunen-Loeve transform (the head's channels
  decorrelated) in bits per code, keys and values, its basis free;
- `ratio_codes_at_model_cost`: the ratio if the codes cost `codes_per_channel_model` and the rest
  of the block what it costs today; `..._no_header` the same without the 48-byte header;
  `ratio_codes_temporal_no_header` with the codes at `codes_temporal` and no header.

  python3 bench/ecq_bounds.py [--kvtier build/tools/cli/kvtier] [--model FILE] [--json]
Needs numpy and the zstd program (scripts/install_deps.sh installs both).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import numpy as np
except ImportError:
    sys.exit("ecq_bounds: needs numpy (python3-numpy; scripts/install_deps.sh installs it)")

REPO = Path(__file__).resolve().parent.parent
HEADER_BYTES = 48
STEP_EXP_BIAS = 112
CENTER_MAX = np.float32(30000.0)
# Quarter bits of the keys' and the values' steps (entropy_quant.h, EcqPrecision).
PRECISIONS = {"ecq5": (20, 20), "ecq6": (24, 24), "ecq6v5": (24, 21)}


def step_of(e: int) -> np.float32:
    q = e - STEP_EXP_BIAS
    whole = math.floor(q / 8)
    return np.float32(math.ldexp(2.0 ** ((q - 8 * whole) / 8), whole))


def step_byte(target: np.float32, floor: np.float32) -> int:
    """The byte of the step nearest `target` in eighths of an octave, not below `floor`."""
    with np.errstate(divide="ignore"):
        near = np.rint(np.float32(8) * np.log2(np.maximum(target, np.float32(1e-30)))
                       + np.float32(STEP_EXP_BIAS))
        up = np.ceil(np.float32(8) * np.log2(floor) + np.float32(STEP_EXP_BIAS))
    e = int(np.clip(max(near, up), 0, 255))
    while e < 255 and step_of(e) < floor:
        e += 1
    return e


def quantize_plane(x: np.ndarray, heads: int, quarter_bits: int):
    """x: [tokens][channels] float32. Returns the codes (int, before the escape), the step bytes
    and the zigzag centers."""
    tokens, channels = x.shape
    head_dim = channels // heads
    d = x - x[0]
    s1 = np.cumsum(d, axis=0, dtype=np.float32)[-1]  # Sequential sums, as the encoder's.
    s2 = np.cumsum(d * d, axis=0, dtype=np.float32)[-1]
    inv_t = np.float32(1.0) / np.float32(tokens)
    var = (s2 - s1 * s1 * inv_t) * inv_t
    mean = x[0] + s1 * inv_t
    sd = np.sqrt(np.maximum(var, np.float32(0)))
    scale = np.float32(2.0 ** (2 - quarter_bits / 4))
    codes = np.empty(x.shape, dtype=np.int64)
    steps, centers = [], np.empty(channels, dtype=np.int64)
    for h in range(heads):
        cs = slice(h * head_dim, (h + 1) * head_dim)
        varying = sd[cs][sd[cs] > 0]
        geo = np.float32(2.0 ** np.mean(np.log2(varying.astype(np.float64)))) if varying.size \
            else np.float32(0)
        floor = np.max(np.abs(mean[cs]) / CENTER_MAX)
        e = step_byte(geo * scale, floor)
        step = step_of(e)
        steps.append(e)
        cen = np.clip(np.rint(mean[cs] / step), -32767, 32767)
        centers[cs] = cen
        codes[:, cs] = np.rint(x[:, cs] * (np.float32(1) / step) - cen).astype(np.int64)
    return codes, steps, centers


def zigzag(v: np.ndarray) -> np.ndarray:
    return np.where(v >= 0, 2 * v, -2 * v - 1)


def zstd_bytes(data: bytes) -> int:
    try:
        out = subprocess.run(["zstd", "-1", "-q", "-c", "--no-check"], input=data,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"ecq_bounds: the zstd program failed ({e}); scripts/install_deps.sh installs it")
    return len(out)


def one_table_bits(symbols: np.ndarray) -> float:
    _, counts = np.unique(symbols, return_counts=True)
    return float(-(counts * np.log2(counts / counts.sum())).sum())


_ERF = np.vectorize(math.erf)


def gaussian_bits(v: np.ndarray) -> float:
    """Bits of the integers v under a discretized Gaussian N(0, s^2), s = their own spread."""
    s = max(float(np.sqrt(np.mean(v.astype(np.float64) ** 2))), 0.25)
    k = np.arange(-300, 301)
    cdf = 0.5 * (1 + _ERF((k + 0.5) / (s * math.sqrt(2))))
    p = np.maximum(np.diff(np.concatenate([[0.0], cdf])), 1e-12)
    return float(-np.log2(p[np.clip(v, -300, 300) + 300]).sum())


def klt_gain(x: np.ndarray, heads: int) -> float:
    """Bits per code a per-head decorrelating transform gains: half the log-ratio of the product
    of the channels' variances to that of the covariance's eigenvalues, per channel."""
    channels = x.shape[1]
    head_dim = channels // heads
    gains = []
    for h in range(heads):
        y = x[:, h * head_dim:(h + 1) * head_dim].astype(np.float64)
        y = y - y.mean(axis=0)
        var = y.var(axis=0)
        keep = var > 0
        if keep.sum() < 2:
            continue
        lam = np.maximum(np.linalg.eigvalsh(np.cov(y[:, keep].T, bias=True)), 1e-30)
        gains.append(0.5 * (np.log2(var[keep]).sum() - np.log2(lam).sum()) / head_dim)
    return float(np.mean(gains)) if gains else 0.0


def analyse(kv: np.ndarray, kvtier_ratio: dict) -> dict:
    blocks, _, tokens, heads, head_dim = kv.shape
    channels = heads * head_dim
    raw = tokens * channels * 2 * 2
    report = {}
    for name, (kq, vq) in PRECISIONS.items():
        acc = dict.fromkeys(["stage_zstd", "codes_zstd", "codes_one_table",
                             "codes_per_channel_model", "codes_temporal"], 0.0)
        klt = [0.0, 0.0]
        for b in range(blocks):
            planes = [kv[b, p].reshape(tokens, channels).astype(np.float32) for p in (0, 1)]
            q = [quantize_plane(planes[p], heads, (kq, vq)[p]) for p in (0, 1)]
            codes = np.stack([q[p][0] for p in (0, 1)])
            z = zigzag(codes)
            escaped = z > 254
            z = np.where(escaped, 255, z).astype(np.uint8)
            cz = zigzag(np.concatenate([q[0][2], q[1][2]])).astype(np.uint16)
            esc = np.stack(planes).astype(np.float16)[escaped].tobytes()
            stage = (bytes((cz & 0xFF).astype(np.uint8)) + bytes((cz >> 8).astype(np.uint8))
                     + bytes(q[0][1] + q[1][1]) + z.tobytes() + esc)
            acc["stage_zstd"] += zstd_bytes(stage)
            acc["codes_zstd"] += zstd_bytes(z.tobytes())
            acc["codes_one_table"] += one_table_bits(z) / 8
            model = temporal = 0.0
            for p in (0, 1):
                for c in range(channels):
                    v = codes[p, :, c]
                    bits = gaussian_bits(v)
                    model += bits
                    temporal += min(bits, gaussian_bits(np.diff(v, prepend=0)))
            acc["codes_per_channel_model"] += model / 8
            acc["codes_temporal"] += temporal / 8
            for p in (0, 1):
                klt[p] += klt_gain(planes[p], heads)
        row = {k: round(v / blocks, 1) for k, v in acc.items()}
        kvtier_bytes = raw / kvtier_ratio[name]
        row = {"kvtier_bytes": round(kvtier_bytes, 1), "header": HEADER_BYTES,
               "steps": 2 * heads, "centers_raw": 4 * channels, **row}
        row["replica_within_1pct"] = abs(row["stage_zstd"] + HEADER_BYTES - kvtier_bytes) \
            <= 0.01 * kvtier_bytes
        row["klt_bits_per_code"] = [round(klt[0] / blocks, 3), round(klt[1] / blocks, 3)]
        rest = kvtier_bytes - row["codes_zstd"]
        row["kvtier_ratio"] = round(kvtier_ratio[name], 3)
        row["ratio_codes_at_model_cost"] = round(raw / (rest + row["codes_per_channel_model"]), 3)
        row["ratio_codes_at_model_cost_no_header"] = round(
            raw / (rest - HEADER_BYTES + row["codes_per_channel_model"]), 3)
        row["ratio_codes_temporal_no_header"] = round(
            raw / (rest - HEADER_BYTES + row["codes_temporal"]), 3)
        report[name] = row
    return {"blocks": int(blocks), "block_bytes": raw,
            "geometry": {"tokens": int(tokens), "kv_heads": int(heads), "head_dim": int(head_dim)},
            "codecs": report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kvtier", default=str(REPO / "build" / "tools" / "cli" / "kvtier"))
    parser.add_argument("--model", help="model file (default: bench codec's, the shared one)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ecq-bounds-") as tmp:
        npy = os.path.join(tmp, "kv.npy")
        argv = [args.kvtier, "bench", "codec", "--save-model-kv", npy, "--json", "--repeat", "1",
                "--no-zstd-cli", "--bytes", "1MiB", "--ladder-tokens", "256"]
        if args.model:
            argv += ["--model", args.model]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True)
            failure = proc.stderr.strip() if proc.returncode != 0 else None
        except OSError as e:
            failure = str(e)
        if failure is not None:
            print(f"ecq_bounds: {' '.join(argv[:3])} failed: {failure}", file=sys.stderr)
            return 1
        kv = np.load(npy)
    model = Path(args.model).stem if args.model else "stories260K"
    ratios = {r["codec"]: r["ratio"] for r in json.loads(proc.stdout) if r["data"] == model}
    if not set(PRECISIONS) <= set(ratios):
        print(f"ecq_bounds: bench codec reported no {model} rows for {sorted(PRECISIONS)}",
              file=sys.stderr)
        return 1
    report = {"model": model, **analyse(kv, ratios)}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{model}: {report['blocks']} blocks of {report['block_bytes']} bytes")
    for name, row in report["codecs"].items():
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
