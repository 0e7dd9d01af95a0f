#!/usr/bin/env python3
"""What each codec does to a real vLLM's predictions, on KV that vLLM computed and kvtier's
connector stored and loaded: `kvtier bench quality`, judged inside vLLM.

Goal: `kvtier bench quality` judges the codecs on KV that kvtier's own runtime computed. A user
of the vLLM connector stores the KV that vLLM computed, through the codec named by `codec` in
kv_connector_extra_config, and vLLM then predicts over what the connector loaded. This script
measures that path end to end, on the same trained model (the shared stories260K), the same
text windows and the same predictions, with the same figures: KL divergence of the next-token
distributions (mean and max, nats), top-1 agreement (flips, the exact run's near ties, the
flips beyond them and the clearest flipped prediction's gap),
perplexity of the text's tokens and its relative change, and whether the row meets "99.9 %
precision" (top-1 agreement >= 99.9 % and |perplexity change| <= 0.1 %, docs/codecs.md).

The model. vLLM's CPU attention takes head sizes of 32 and more; stories260K's heads have 8
dimensions. The script writes the llama2.c checkpoint as a Hugging Face Llama whose heads have 32
dimensions and that computes exactly what the model computes (convert_llama2c):
  - q and k: the model rotates adjacent pairs (x[2i], x[2i+1]) at frequency 10000^(-2i/8);
    Hugging Face's Llama rotates (x[j], x[j+16]) at 10000^(-2j/32). Pair i goes to j = 4i, the
    same frequency bit for bit; q_proj's other rows are zero, so whatever k holds in the added
    dimensions adds nothing to q.k (k_proj repeats pair i's rows at j = 4i+1..4i+3).
  - q is scaled by 2 = sqrt(32 / 8), so vLLM's scale 1/sqrt(32) is the model's 1/sqrt(8).
  - v: dimension d of a head is the model's d % 8; o_proj reads only dimensions 0..7.
  The check that it is exact is in every run: vLLM's perplexity of the text with no cache
  against the runtime's (`kvtier bench quality`'s perplexity_exact over the same windows), which
  must agree within PERPLEXITY_AGREEMENT (measured: 5.5e-6 relative; a wrong pairing or scale
  moves it by percents). The added rows of k_proj and v_proj repeat the model's own (q_proj and
  o_proj ignore them), so a page's 32 channels per head have the model's statistics rather than
  zeros (a zero channel would widen a min-max group); the KL and flips here are over pages of
  that shape, in float32, and the ratios are not the model's: `kvtier bench quality`'s rows for
  the same codecs and windows (its own FP16 KV, 8-dimension heads) are reported beside, as
  "runtime", with their ratios.

Method: `kvtier bench quality --windows-json` gives the windows (BOS, 255 tokens of prefix, 128
teacher-forced tokens and the one after them; 13 windows of the built-in text) and the
runtime's rows for the same codecs. Every vLLM process runs vLLM's offline API in float32, its
prefix cache off, 32-token pages, the engine core in the process; this script starts itself as
that process (--worker). Then:
  1. no cache: each window whole, with prompt_logprobs over the whole vocabulary (vLLM's
     recompute, the reference);
  2. per codec, a process with the connector (`codec` = the codec, an empty SSD directory)
     sends each window's 256-token prefix once: vLLM computes it and the connector stores it,
     encoded, and flushes it to the SSD tier when the process ends;
  3. per codec, a fresh process on that directory (the host tier empty: every hit is decoded
     from an SSD record) sends each window whole with prompt_logprobs and
     skip_reading_prefix_cache off (vLLM would skip every cache for a prompt_logprobs request
     otherwise) and the connector's per-request control {"save": false}: the connector loads the
     256-token prefix and vLLM computes the rest, whose 128 predictions are compared with 1.'s.
A window whose prefix is not loaded whole (vLLM's num_cached_tokens != 256) fails the run, as
do a judging process whose prefix blocks did not all come from the SSD tier (the connector's
stats_file) and a vLLM perplexity that does not agree with the runtime's.

  PYTHONPATH=build/python .venv-vllm/bin/python bench/vllm_quality.py [--json]
      [--codecs identity,int8,k8v4,ecq6,ecq6v5,ecq5,int4,int4-rot] [--windows-max 64]
      [--kvtier build/tools/cli/kvtier] [--model ../shared/models/stories260K.bin]
      [--work-dir DIR] [--smoke]

--dtype bfloat16 runs vLLM in bf16 (the check against the runtime then allows 0.1) and also
reports, as reference.float32_*, how far vLLM's bf16 predictions are from its float32 ones with
no cache at all: on stories260K a KL of 7.1e-4 and 30 flips in 1,664, more than int8 or ecq6
change in float32, so every codec's bf16 row sits at that floor (docs/codecs.md).
--smoke: identity and int4 on 2 windows (a test of the script, not a measurement). Without the
shared model the script exits 3 and says so. Took 217 s for the default codecs on two cores
(every vLLM process starts in about 3 s), the smoke run about 70 s.
"""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_ttft import emit_report, portable_args, run_worker

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "stories260K.bin"
DEFAULT_CODECS = "identity,int8,k8v4,ecq6,ecq6v5,ecq5,int4,int4-rot"
HEAD_DIM = 32  # The smallest head size vLLM's CPU attention takes.
PAGE_TOKENS = 32
TOP1_AGREEMENT_MIN = 0.999  # "99.9 % precision", docs/codecs.md.
PERPLEXITY_CHANGE_MAX = 0.001
NEAR_TIE = 0.01  # Exact top-2 logits this close: a flip there is noise (kvtier bench quality's).
# vLLM's no-cache perplexity against the runtime's, per --dtype: float32 (against the runtime's
# FP16 KV) and bfloat16 (every weight and activation rounded to 8 bits of mantissa).
PERPLEXITY_AGREEMENT = {"float32": 1e-3, "bfloat16": 0.1}
EXIT_NO_MODEL = 3


def log(message: str):
    print(f"[vllm_quality {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The model: llama2.c checkpoint -> Hugging Face Llama with 32-dimension heads, exactly.

def read_llama2c(path: Path) -> tuple[dict, dict]:
    """The llama2.c checkpoint (legacy layout: 7 int32 of header, then float32 arrays)."""
    import numpy as np

    raw = path.read_bytes()
    if len(raw) < 28:
        raise ValueError(f"{path}: {len(raw)} bytes, shorter than a llama2.c header")
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    if min(dim, hidden, layers, heads, kv_heads, vocab, seq_len) <= 0 or dim % heads \
            or heads % kv_heads or (dim // heads) % 2 or HEAD_DIM % (dim // heads):
        raise ValueError(f"{path}: header {dim, hidden, layers, heads, kv_heads, vocab, seq_len} "
                         "is not a llama2.c model this script maps (head size even, dividing 32)")
    if not shared:
        raise ValueError(f"{path}: the classifier is not the embedding (not handled here)")
    head = dim // heads
    kv_dim = kv_heads * head
    shapes = {"embedding": (vocab, dim), "rms_att": (layers, dim), "wq": (layers, dim, dim),
              "wk": (layers, kv_dim, dim), "wv": (layers, kv_dim, dim), "wo": (layers, dim, dim),
              "rms_ffn": (layers, dim), "w1": (layers, hidden, dim),
              "w2": (layers, dim, hidden), "w3": (layers, hidden, dim), "rms_final": (dim,)}
    floats = sum(math.prod(s) for s in shapes.values()) + 2 * seq_len * (head // 2)
    if len(raw) != 28 + 4 * floats:
        raise ValueError(f"{path}: {len(raw)} bytes, the header says {28 + 4 * floats}")
    data = np.frombuffer(raw, dtype="<f4", offset=28)
    arrays, pos = {}, 0
    for name, shape in shapes.items():
        n = math.prod(shape)
        arrays[name] = data[pos:pos + n].reshape(shape).copy()
        pos += n
    config = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
                  vocab=vocab, seq_len=seq_len, head=head)
    return config, arrays


def convert_llama2c(src: Path, out: Path) -> dict:
    """Writes config.json and model.safetensors in `out`; returns the config."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    c, a = read_llama2c(src)
    head, spread = c["head"], HEAD_DIM // c["head"]

    def rotary_rows(w, n_heads, copies):
        """Pair (2i, 2i+1) -> rows (4i, 4i + 16) of a 32-row head; with `copies` the pairs
        between (4i+1..4i+3) repeat pair i's weights too (they rotate at other frequencies)."""
        out_rows = np.zeros((n_heads * HEAD_DIM, w.shape[1]), dtype=np.float32)
        for h in range(n_heads):
            for j in range(HEAD_DIM // 2):
                if j % spread and not copies:
                    continue
                for half in range(2):
                    out_rows[h * HEAD_DIM + half * (HEAD_DIM // 2) + j] = \
                        w[h * head + 2 * (j // spread) + half]
        return out_rows

    def value_rows(w, n_heads, copies):  # Row d of a 32-row head: row d % 8 of the model's.
        out_rows = np.zeros((n_heads * HEAD_DIM, w.shape[1]), dtype=np.float32)
        for h in range(n_heads):
            for d in range(HEAD_DIM if copies else head):
                out_rows[h * HEAD_DIM + d] = w[h * head + d % head]
        return out_rows

    q_scale = np.float32(math.sqrt(HEAD_DIM / head))  # 2: exact in float32.
    tensors = {"model.embed_tokens.weight": a["embedding"], "model.norm.weight": a["rms_final"]}
    for layer in range(c["layers"]):
        p = f"model.layers.{layer}."
        tensors[p + "input_layernorm.weight"] = a["rms_att"][layer]
        tensors[p + "post_attention_layernorm.weight"] = a["rms_ffn"][layer]
        tensors[p + "self_attn.q_proj.weight"] = \
            rotary_rows(a["wq"][layer], c["heads"], False) * q_scale
        tensors[p + "self_attn.k_proj.weight"] = rotary_rows(a["wk"][layer], c["kv_heads"], True)
        tensors[p + "self_attn.v_proj.weight"] = value_rows(a["wv"][layer], c["kv_heads"], True)
        tensors[p + "self_attn.o_proj.weight"] = value_rows(a["wo"][layer].T, c["heads"], False).T
        tensors[p + "mlp.gate_proj.weight"] = a["w1"][layer]
        tensors[p + "mlp.down_proj.weight"] = a["w2"][layer]
        tensors[p + "mlp.up_proj.weight"] = a["w3"][layer]
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": c["dim"], "intermediate_size": c["hidden"],
              "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
              "num_key_value_heads": c["kv_heads"], "head_dim": HEAD_DIM,
              "vocab_size": c["vocab"], "max_position_embeddings": c["seq_len"],
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
              "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 1,
              "eos_token_id": 2}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return config


# ---------------------------------------------------------------------------------------------
# The worker: one vLLM process.

def dense_rows(flat, first: int, last: int, vocab: int):
    """Positions [first, last) of vLLM's FlatLogprobs over the whole vocabulary, as a dense
    [rows][vocab] float64 array (a position lists every token, the prompt's own once more)."""
    import numpy as np

    rows = np.full((last - first, vocab), -np.inf)
    for r, pos in enumerate(range(first, last)):
        s, e = flat.start_indices[pos], flat.end_indices[pos]
        rows[r, flat.token_ids[s:e]] = flat.logprobs[s:e]
    if not np.isfinite(rows).all():
        raise RuntimeError(f"vLLM gave logprobs of fewer than {vocab} tokens at some position")
    return rows


def worker(plan_path: str) -> int:
    import numpy as np

    plan = json.loads(Path(plan_path).read_text())
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # Engine core and worker in this process.
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    from vllm import LLM, SamplingParams

    vocab = plan["vocab"]
    llm = LLM(model=plan["model"], dtype=plan["dtype"], skip_tokenizer_init=True,
              max_model_len=plan["max_model_len"], block_size=PAGE_TOKENS, enforce_eager=True,
              seed=0, enable_prefix_caching=False, max_logprobs=vocab,
              kv_transfer_config=plan["connector"], max_num_batched_tokens=plan["max_model_len"],
              distributed_executor_backend="uni")
    prefix, cont = plan["prefix_tokens"], plan["continue_tokens"]
    rows, cached = [], []
    for seq in plan["windows"]:
        if plan["phase"] == "store":
            params = SamplingParams(temperature=0, max_tokens=1, detokenize=False)
            prompt = seq[:prefix]
        else:
            extra = {"kv_transfer_params": {"kvtier": {"save": False}}} if plan["connector"] \
                else None
            params = SamplingParams(temperature=0, max_tokens=1, detokenize=False,
                                    prompt_logprobs=-1, flat_logprobs=True,
                                    skip_reading_prefix_cache=plan["connector"] is None,
                                    extra_args=extra)
            prompt = seq
        out = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0]
        cached.append(out.num_cached_tokens or 0)
        if plan["phase"] == "store":
            continue
        flat = out.prompt_logprobs
        # With a hit vLLM gives the positions it computed only: the list ends at the prompt's
        # end either way. Token t's logprobs are the prediction made at position t - 1.
        offset = len(seq) - len(flat)
        first = prefix + 1 - offset
        if first < 1:
            raise RuntimeError(f"vLLM computed from position {offset}, after the prefix")
        rows.append(dense_rows(flat, first, first + cont, vocab))
    if rows:
        np.save(plan["rows_out"], np.stack(rows))
    Path(plan["out"]).write_text(json.dumps({"num_cached_tokens": cached}))
    del llm  # Shuts the engine down: the connector flushes its host tier to the SSD tier.
    return 0


def run_process(args, work: Path, name: str, plan: dict) -> dict:
    plan = dict(plan, out=str(work / f"{name}.out.json"), rows_out=str(work / f"{name}.npy"))
    t0 = time.perf_counter()
    result = run_worker(__file__, "vllm_quality", work, name, plan, args.process_timeout_s)
    if plan["phase"] == "judge":
        import numpy as np
        result["rows"] = np.load(plan["rows_out"])
    log(f"{name}: done in {time.perf_counter() - t0:.0f} s")
    return result


# ---------------------------------------------------------------------------------------------
# The figures.

def agreement(exact, decoded, next_tokens) -> dict:
    """kvtier bench quality's figures over [rows][vocab] log-probabilities."""
    import numpy as np

    p = np.exp(exact)
    kl = np.maximum((p * (exact - decoded)).sum(axis=1), 0.0)
    top_e, top_d = exact.argmax(axis=1), decoded.argmax(axis=1)
    best2 = np.sort(exact, axis=1)[:, -2:]
    gap = best2[:, 1] - best2[:, 0]  # The exact logits' best two apart (log-probabilities alike).
    flips = top_e != top_d
    rows = np.arange(len(next_tokens))
    ppl_exact = float(np.exp(-exact[rows, next_tokens].mean()))
    ppl = float(np.exp(-decoded[rows, next_tokens].mean()))
    top1 = float((top_e == top_d).mean())
    change = ppl / ppl_exact - 1
    return {"rows": int(len(rows)), "kl_mean": float(kl.mean()), "kl_max": float(kl.max()),
            "top1_agreement": top1, "top1_flips": int(flips.sum()),
            "near_ties": int((gap < NEAR_TIE).sum()),
            "top1_flips_beyond_near_ties": int((flips & (gap >= NEAR_TIE)).sum()),
            "flip_gap_max": float(gap[flips].max()) if flips.any() else 0.0,
            "perplexity_exact": ppl_exact, "perplexity": ppl, "perplexity_change": change,
            "meets_99_9": bool(top1 >= TOP1_AGREEMENT_MIN
                               and abs(change) <= PERPLEXITY_CHANGE_MAX)}


def runtime_rows(args, work: Path, codecs: list[str]) -> tuple[dict, dict]:
    """The windows, and `kvtier bench quality`'s rows for the same codecs (the runtime's KV)."""
    windows_json = work / "windows.json"
    cmd = [str(args.kvtier), "bench", "quality", "--model", str(args.model), "--tokenizer",
           str(args.model.parent / "tok512.bin"), "--codecs", ",".join(codecs),
           "--windows-max", str(args.windows_max), "--windows-json", str(windows_json), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.process_timeout_s)
    if proc.returncode != 0:
        sys.exit(f"vllm_quality: {' '.join(cmd)} failed (exit {proc.returncode}):\n"
                 f"{proc.stderr[-3000:]}")
    rows = {r["codec"]: r for r in json.loads(proc.stdout)}
    return json.loads(windows_json.read_text()), rows


def measure(args, work: Path, codecs: list[str], sockets: Path) -> dict:
    import numpy as np

    windows, runtime = runtime_rows(args, work, codecs)
    prefix, cont = windows["prefix_tokens"], windows["continue_tokens"]
    seqs = windows["windows"]
    model_dir = work / "model"
    try:
        config = convert_llama2c(args.model, model_dir)
    except ValueError as e:  # A checkpoint this mapping does not take, named by read_llama2c.
        sys.exit(f"vllm_quality: {e}")
    log(f"{len(seqs)} windows of {len(seqs[0])} tokens; model written to {model_dir}")
    base = {"model": str(model_dir), "vocab": config["vocab_size"],
            "max_model_len": config["max_position_embeddings"], "prefix_tokens": prefix,
            "continue_tokens": cont, "windows": seqs, "dtype": args.dtype}
    exact = run_process(args, work, "no_cache", dict(base, phase="judge", connector=None))
    next_tokens = np.array([seq[prefix + 1:prefix + 1 + cont] for seq in seqs]).reshape(-1)
    exact_rows = exact["rows"].reshape(-1, config["vocab_size"])
    reference = agreement(exact_rows, exact_rows, next_tokens)
    runtime_ppl = next(iter(runtime.values()))["perplexity_exact"]
    ppl_gap = reference["perplexity_exact"] / runtime_ppl - 1
    if abs(ppl_gap) > PERPLEXITY_AGREEMENT[args.dtype]:
        sys.exit(f"vllm_quality: vLLM's perplexity {reference['perplexity_exact']:.6f} and the "
                 f"runtime's {runtime_ppl:.6f} differ by {ppl_gap:+.2e}: the converted model "
                 "does not compute what the model computes")
    floor = {}
    if args.dtype != "float32":
        # The dtype's own arithmetic against float32's, no cache either side: the KL a codec
        # cannot be told apart from (every KV change re-rolls every later rounding).
        f32 = run_process(args, work, "no_cache_float32",
                          dict(base, phase="judge", connector=None, dtype="float32"))
        f32_rows = f32["rows"].reshape(exact_rows.shape)
        floor = {f"float32_{k}": v for k, v in agreement(f32_rows, exact_rows, next_tokens).items()
                 if k in ("kl_mean", "kl_max", "top1_agreement", "top1_flips",
                          "top1_flips_beyond_near_ties")}
    rows = []
    for codec in codecs:
        cache = work / f"cache_{codec}"
        stats = work / f"{codec}.stats.json"
        extra = {"host_bytes": 64 << 20, "ssd_dirs": [str(cache)], "ssd_bytes": 256 << 20,
                 "ssd_segment_bytes": 16 << 20, "stats_file": str(stats),
                 "runtime_dir": str(sockets), "codec": codec}
        connector = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
                     "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                     "kv_connector_extra_config": extra}
        run_process(args, work, f"store_{codec}", dict(base, phase="store", connector=connector))
        judged = run_process(args, work, f"judge_{codec}",
                             dict(base, phase="judge", connector=connector))
        missed = [w for w, n in enumerate(judged["num_cached_tokens"]) if n != prefix]
        if missed:
            sys.exit(f"vllm_quality: {codec}: windows {missed} loaded "
                     f"{[judged['num_cached_tokens'][w] for w in missed]} tokens, not {prefix}")
        row = {"codec": codec, "windows": len(seqs)}
        row.update(agreement(exact_rows, judged["rows"].reshape(exact_rows.shape), next_tokens))
        hits = json.loads(stats.read_text())["tiers"]["ssd"]["hits"] if stats.exists() else 0
        if hits != len(seqs) * prefix // PAGE_TOKENS * config["num_hidden_layers"]:
            sys.exit(f"vllm_quality: {codec}: {hits} SSD hits; every prefix block comes from "
                     "the SSD tier after the restart")
        rt = runtime.get(codec, {})
        row["runtime"] = {k: rt.get(k) for k in ("ratio", "kl_mean", "kl_max", "top1_agreement",
                                                 "top1_flips", "top1_flips_beyond_near_ties",
                                                 "flip_gap_max", "perplexity_change",
                                                 "meets_99_9")}
        rows.append(row)
        log(f"{codec}: KL {row['kl_mean']:.2e}, top-1 {100 * row['top1_agreement']:.2f} %, "
            f"ppl {100 * row['perplexity_change']:+.4f} % (runtime KL {rt.get('kl_mean', 0):.2e})")
    return {"reference": dict(reference, runtime_perplexity_exact=runtime_ppl,
                              perplexity_gap=ppl_gap, **floor),
            "rows": rows}


def render_text(report: dict) -> str:
    ref = report["reference"]
    lines = [f"vLLM no-cache perplexity {ref['perplexity_exact']:.6f}, the runtime's "
             f"{ref['runtime_perplexity_exact']:.6f} ({ref['perplexity_gap']:+.1e}); "
             f"{ref['rows']} predictions, {ref['near_ties']} near ties",
             f"{'codec':<10} {'KL mean':>10} {'KL max':>10} {'top-1':>9} {'ppl change':>11} "
             f"{'99.9 %':>6}   runtime: {'KL mean':>10} {'top-1':>9} {'ppl change':>11}"]
    for r in report["rows"]:
        rt = r["runtime"]
        rt_text = "" if rt.get("kl_mean") is None else \
            f"{rt['kl_mean']:>10.3e} {100 * rt['top1_agreement']:>8.2f}% " \
            f"{100 * rt['perplexity_change']:>10.4f}%"
        lines.append(f"{r['codec']:<10} {r['kl_mean']:>10.3e} {r['kl_max']:>10.3e} "
                     f"{100 * r['top1_agreement']:>8.2f}% {100 * r['perplexity_change']:>10.4f}% "
                     f"{'yes' if r['meets_99_9'] else 'no':>6}   runtime: {rt_text}")
    return "\n".join(lines)


PATH_OPTIONS = {"--work-dir": "DIR", "--model": "MODEL", "--kvtier": "KVTIER"}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codecs", default=DEFAULT_CODECS,
                        help=f"comma list of the connector's codecs (default {DEFAULT_CODECS})")
    parser.add_argument("--windows-max", type=int, default=64)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL,
                        help="llama2.c checkpoint, its tok512.bin beside it")
    parser.add_argument("--kvtier", type=Path, default=REPO / "build" / "tools" / "cli" / "kvtier")
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--process-timeout-s", type=float, default=900)
    parser.add_argument("--dtype", choices=sorted(PERPLEXITY_AGREEMENT), default="float32",
                        help="vLLM's model and KV dtype (default float32, which the check "
                             "against the runtime can hold to 1e-3)")
    parser.add_argument("--smoke", action="store_true",
                        help="identity and int4 on 2 windows: a test of the script")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser


def main() -> int:
    parser = make_parser()
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    if not args.model.exists():
        print(f"vllm_quality: no model at {args.model} (the shared stories260K); give --model",
              file=sys.stderr)
        return EXIT_NO_MODEL
    if not args.kvtier.exists():
        parser.error(f"--kvtier {args.kvtier}: not built (./run.sh builds it)")
    try:
        import kvtier.vllm  # noqa: F401 - the connector must import where vLLM runs.
    except ImportError as e:
        sys.exit(f"vllm_quality: {e}: run with the vLLM venv's python "
                 "(scripts/setup_vllm_venv.sh) and PYTHONPATH=build/python")
    if args.smoke:
        args.codecs, args.windows_max = "identity,int4", 2
    codecs = [c for c in args.codecs.split(",") if c]
    if not codecs or args.windows_max < 1:
        parser.error("--codecs names at least one codec; --windows-max is at least 1")
    started = time.perf_counter()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kvtier-vllm-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    # The connector's sockets live here: a short path (AF_UNIX names are at most 107 bytes).
    sockets = Path(tempfile.mkdtemp(prefix="kvtier-vq-"))
    report = {"setup": {"model": args.model.name, "head_dim_in_vllm": HEAD_DIM,
                        "dtype": args.dtype, "page_tokens": PAGE_TOKENS, "cpus": os.cpu_count(),
                        "command": "bench/vllm_quality.py " + " ".join(
                            portable_args(sys.argv[1:], PATH_OPTIONS))}}
    try:
        report.update(measure(args, work, codecs, sockets))
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    return emit_report(report, started, args.json, render_text, work,
                       keep=args.work_dir is not None)


if __name__ == "__main__":
    sys.exit(main())
