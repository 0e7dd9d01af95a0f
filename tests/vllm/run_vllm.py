#!/usr/bin/env python3
"""Runs a real vLLM (offline LLM API) on prompts given as token ids, greedy, and writes the
generated token ids as JSON: the building block of the end-to-end tests and the TTFT benchmark.

  python tests/vllm/run_vllm.py --model DIR --prompts P.json --out OUT.json
      [--connector CONFIG.json] [--max-tokens 16] [--block-size 32] [--repeat N]
      [--tensor-parallel-size N] [--multiprocess]

P.json: [{"tokens": [...], "cache_salt": "..." (optional), "kv_transfer_params": {...}
(optional: the request's, as SamplingParams' extra_args carry them)}, ...], run one after another
(so a later prompt can hit what an earlier one stored). CONFIG.json: the --kv-transfer-config value.
OUT.json: {"outputs": [[token ids], ...], "margins": [[m, ...], ...], "ttft_s": [...],
"startup_s": s}; margins are each generated token's top-1 minus top-2 logit (vLLM's raw
logprobs of the two best tokens: their difference is the logits' difference), the distance a
rounding difference would have to cover to flip that greedy token; ttft_s is the time to the
first generated token of each prompt (a generate() call with max_tokens=1, then the full
generation). With one rank vLLM's engine core and worker run in this process (its in-process
mode: about 9 s to start here against 16 s for its three processes); --multiprocess keeps them
apart, as `vllm serve` and more than one rank do.
"""

import argparse
import json
import os
import sys
import time


def top_margin(step) -> float:
    """Top-1 minus top-2 logprob of one generated step ({token: Logprob} with the two best)."""
    best = sorted((lp.logprob for lp in step.values()), reverse=True)
    return best[0] - best[1] if len(best) > 1 else float("inf")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--connector")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--prefix-caching", action="store_true",
                        help="keep vLLM's own prefix cache on (off by default, so every hit "
                             "comes from kvtier)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1,
                        help="tensor-parallel ranks (vLLM's CPU build runs one worker process "
                             "per rank; VLLM_CPU_OMP_THREADS_BIND gives each rank its CPUs)")
    parser.add_argument("--multiprocess", action="store_true",
                        help="vLLM's engine core and worker in processes of their own, as vllm "
                             "serve runs them (with one rank they run in this process otherwise)")
    parser.add_argument("--ttft", action="store_true",
                        help="measure each prompt's time to first token before generating")
    args = parser.parse_args()

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # One rank: the engine core and the worker in this process (vLLM's in-process mode), which
    # starts in about half the time of three processes. The connector's scheduler and worker
    # roles still talk through its lookup socket, as they do across processes.
    in_process = args.tensor_parallel_size == 1 and not args.multiprocess
    if in_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    kv_transfer_config = None
    if args.connector:
        with open(args.connector) as f:
            kv_transfer_config = json.load(f)
    with open(args.prompts) as f:
        prompts = json.load(f)

    start = time.perf_counter()
    llm = LLM(model=args.model, dtype="bfloat16", max_model_len=args.max_model_len,
              block_size=args.block_size, enforce_eager=True, seed=0,
              enable_prefix_caching=args.prefix_caching, kv_transfer_config=kv_transfer_config,
              max_num_batched_tokens=args.max_model_len,
              tensor_parallel_size=args.tensor_parallel_size,
              **({"distributed_executor_backend": "uni"} if in_process else {}))
    startup = time.perf_counter() - start

    outputs, margins, ttfts = [], [], []
    for p in prompts:
        prompt = {"prompt_token_ids": p["tokens"]}
        if p.get("cache_salt"):
            prompt["cache_salt"] = p["cache_salt"]
        extra_args = {"kv_transfer_params": p["kv_transfer_params"]} \
            if "kv_transfer_params" in p else None
        if args.ttft:
            t0 = time.perf_counter()
            llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1,
                                                  extra_args=extra_args), use_tqdm=False)
            ttfts.append(time.perf_counter() - t0)
        result = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=args.max_tokens,
                                                       logprobs=2, extra_args=extra_args),
                              use_tqdm=False)
        completion = result[0].outputs[0]
        outputs.append(list(completion.token_ids))
        margins.append([top_margin(step) for step in completion.logprobs or []])
    with open(args.out, "w") as f:
        json.dump({"outputs": outputs, "margins": margins, "ttft_s": ttfts,
                   "startup_s": startup}, f)
    del llm
    return 0


if __name__ == "__main__":
    sys.exit(main())
