#!/usr/bin/env python3
"""Writes N(0,1) Gaussian FP16 data like bench/micro/codecs_bench.cc's blocks, for `zstd -b`.

Two files: <out>.raw (plain little-endian FP16) and <out>.shuf (each 1 MiB block byte-shuffled
as the shuffle-zstd codec does: all low bytes, then all high bytes; docs/codecs.md). Only the
standard library (random, struct), so it runs where numpy is absent. The directory of
OUT_PREFIX is created when it does not exist. Not a test: it only feeds the benchmark in
docs/benchmarks.md.

usage: bench/gen_fp16_gaussian.py OUT_PREFIX [--mib 4] [--seed 42]
"""
import argparse
import os
import random
import struct
import sys

BLOCK_BYTES = 1 << 20  # One 256-token x 8-head x 128-dim FP16 block.


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_prefix")
    ap.add_argument("--mib", type=int, default=4)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    if not 1 <= args.mib <= 1024:
        sys.exit("gen_fp16_gaussian: --mib must be 1..1024")
    rng = random.Random(args.seed)
    halves = args.mib * BLOCK_BYTES // 2
    # struct's 'e' format packs IEEE binary16 with round-to-nearest-even, like F32ToF16.
    raw = struct.pack("<%de" % halves, *(rng.gauss(0.0, 1.0) for _ in range(halves)))
    shuffled = bytearray()
    for start in range(0, len(raw), BLOCK_BYTES):
        block = raw[start:start + BLOCK_BYTES]
        shuffled += block[0::2] + block[1::2]
    out_dir = os.path.dirname(args.out_prefix)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    with open(args.out_prefix + ".raw", "wb") as f:
        f.write(raw)
    with open(args.out_prefix + ".shuf", "wb") as f:
        f.write(bytes(shuffled))
    print("wrote %s.raw and %s.shuf, %d MiB each" % (args.out_prefix, args.out_prefix, args.mib))


if __name__ == "__main__":
    main()
