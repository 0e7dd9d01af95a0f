#!/usr/bin/env python3
"""Draws the plots of docs/benchmarks.md from the benchmarks' JSON reports.

One subcommand per kind of plot; each reads one report (a file, or - for stdin) and writes one
image whose format follows the extension of -o (.png, or .svg):

  ssd       bench/ssd_vs_fio.sh --json: the SSD tier against fio, write and read, per round, with
            the medians and the median of the per-round ratios
  decode    kvtier bench decode --json: ms per decode token of each configuration (median and
            min-max), the offload roofline of the same run
  codec     kvtier bench codec --json: compression ratio against quality (relative RMSE and
            attention-output cosine), one point per codec and data kind
  ttft      bench/vllm_ttft.py --json: vLLM's time to first token against document length, one
            line per mode (recompute, vLLM's prefix cache, kvtier host, kvtier SSD after restart)
  mooncake  bench/peers/mooncake_store.py --json: median GB/s of put and get per value size and
            client count, Mooncake Store against kvtier's remote and host tiers
  llama     bench/peers/llama_prompt_cache.py --json: median TTFT of a repeated prompt, llama.cpp's
            prompt cache against kvtier
  lmcache   bench/peers/lmcache_vllm.py --json: median TTFT of a hit per measure and document
            length, LMCache against kvtier in the same vLLM, with recompute and vLLM's prefix cache
  serve     bench/serve_trace.py --json: vllm serve under a chat trace, per concurrency and mode
            (recompute, vLLM's prefix cache, kvtier, kvtier serve, LMCache): TTFT p50 and p99,
            output tokens per second

  python3 bench/plot.py KIND REPORT.json -o docs/PLOT.png

matplotlib comes from Debian (python3-matplotlib, scripts/install_deps.sh) and belongs to
/usr/bin/python3; started by another interpreter that lacks it (a pyenv or venv python first on
PATH), the script runs itself again with /usr/bin/python3. Exit status: 0 when the image was
written, 1 when the report cannot be plotted (one line on stderr says why), 2 for a command line
that cannot be parsed.
"""

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"


class PlotError(Exception):
    """A report that cannot be plotted; the message names what is wrong."""


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        if os.access(SYSTEM_PYTHON, os.X_OK) and not os.environ.get("KVTIER_PLOT_REEXEC"):
            os.environ["KVTIER_PLOT_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
        raise PlotError("matplotlib is missing: run scripts/install_deps.sh "
                        "(Debian's python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# ---------------------------------------------------------------------------------------------
# Reading reports.

def load_report(path: str):
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise PlotError(f"{path}: {e.strerror}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PlotError(f"{path}: not JSON ({e.msg} at line {e.lineno})")


def need(obj, key: str, what: str):
    """obj[key], or a PlotError saying which report lacks it."""
    if not isinstance(obj, dict) or key not in obj:
        raise PlotError(f"not {what}: no '{key}'")
    return obj[key]


def number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlotError(f"{what} is not a number: {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------------
# Drawing helpers.

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f"]
# The codec plot has more series than COLORS: COLORS, then their darker and lighter kin.
CODEC_COLORS = COLORS + ["#bcbd22", "#17becf", "#000000", "#aec7e8", "#ffbb78", "#98df8a",
                         "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2"]


def fmt(v: float) -> str:
    """A bar's label: 3 significant digits, never an exponent (1560, 53.4, 0.347)."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def grouped_bars(ax, groups: list[str], series: dict, log_scale: bool, unit: str,
                 label_values: bool = True, colors: list[str] = COLORS) -> None:
    """groups along x, one bar per series in each group; None values are left out."""
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + 0.1 + width * (i + 0.5) - 0.5 for g in range(len(groups))]
        pts = [(x, v) for x, v in zip(xs, values) if v]
        if not pts:
            ax.bar([], [], color=colors[i % len(colors)], label=name)
            continue
        bars = ax.bar([p[0] for p in pts], [p[1] for p in pts], width * 0.95,
                      color=colors[i % len(colors)], label=name)
        if label_values:
            ax.bar_label(bars, labels=[fmt(p[1]) for p in pts], fontsize=7, padding=1)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    if log_scale:
        ax.set_yscale("log")
    ax.set_ylabel(unit + (" (log scale)" if log_scale else ""))
    ax.grid(axis="y", color="#dddddd")
    ax.set_axisbelow(True)


def note(fig, text: str) -> None:
    fig.text(0.01, 0.01, text, fontsize=8, color="#444444", ha="left", va="bottom")


# ---------------------------------------------------------------------------------------------
# ssd: bench/ssd_vs_fio.sh --json.

def plot_ssd(plt, report):
    what = "a bench/ssd_vs_fio.sh --json report"
    rounds = need(report, "rounds", what)
    if not isinstance(rounds, list) or not rounds:
        raise PlotError(f"not {what}: 'rounds' is empty")
    series = {"fio write": [], "kvtier write": [], "fio read": [], "kvtier read": []}
    groups = []
    for i, r in enumerate(rounds):
        fio, kv = need(r, "fio", what), need(r, "kvtier", what)
        groups.append(f"round {r.get('round', i + 1)}")
        for op in ("write", "read"):
            series[f"fio {op}"].append(
                number(need(fio, f"{op}_bytes_per_s", what), f"round {i + 1}: fio {op}") / 1e6)
            series[f"kvtier {op}"].append(
                number(need(kv, f"{op}_bytes_per_s", what), f"round {i + 1}: kvtier {op}") / 1e6)
    groups.append("median")
    for name in series:
        series[name].append(statistics.median(series[name]))
    ratio = {op: statistics.median(k / f for k, f in zip(series[f"kvtier {op}"][:-1],
                                                         series[f"fio {op}"][:-1]))
             for op in ("write", "read")}
    cfg = report.get("config", {})
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(groups)), 4.8))
    # fio light, kvtier dark; write blue, read orange.
    grouped_bars(ax, groups, series, log_scale=False, unit="MB/s",
                 colors=["#9ecae1", "#1f77b4", "#fdae6b", "#d94801"])
    ax.set_title("SSD tier against fio on the same directory: sequential "
                 f"{cfg.get('block_bytes', '?')} blocks, queue depth {cfg.get('queue_depth', '?')}"
                 f", O_DIRECT\nmedian of the per-round ratios kvtier / fio: write {ratio['write']:.2f}x, "
                 f"read {ratio['read']:.2f}x over {len(rounds)} rounds", fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, frameon=False)
    note(fig, f"{cfg.get('total_bytes', '?')} per run; fio and kvtier alternate, odd rounds "
              "fio first; bench/ssd_vs_fio.sh --json")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ---------------------------------------------------------------------------------------------
# decode: kvtier bench decode --json.

DECODE_TITLES = {"resident": "resident", "resident-topk": "resident\ntop-k",
                 "offload": "offload", "ladder": "ladder\n(int8/int4)",
                 "ladder-dequant": "ladder\n(to FP16)", "topk": "top-k",
                 "reference": "reference"}


def plot_decode(plt, report):
    what = "a kvtier bench decode --json report"
    configs = need(report, "configs", what)
    if not isinstance(configs, list) or not configs:
        raise PlotError(f"not {what}: 'configs' is empty")
    names, med, lo, hi, roof = [], [], [], [], []
    for c in configs:
        name = str(need(c, "config", what))
        names.append(DECODE_TITLES.get(name, name))
        m = number(need(c, "ms_per_token", what), f"{name}: ms_per_token")
        med.append(m)
        lo.append(m - number(c.get("ms_per_token_min", m), f"{name}: ms_per_token_min"))
        hi.append(number(c.get("ms_per_token_max", m), f"{name}: ms_per_token_max") - m)
        r = c.get("roofline_ms_per_token") or 0
        roof.append(number(r, f"{name}: roofline_ms_per_token") if r else None)
    fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(names)), 4.8))
    xs = list(range(len(names)))
    bars = ax.bar(xs, med, 0.6, color=COLORS[0], yerr=[lo, hi], capsize=4,
                  label="ms per token (median, min-max)")
    ax.bar_label(bars, labels=[fmt(m) for m in med], fontsize=8, padding=2)
    first = True
    for x, r in zip(xs, roof):
        if r:
            ax.hlines(r, x - 0.4, x + 0.4, colors=COLORS[3], linewidth=2.5,
                      label="roofline of the same run" if first else None)
            ax.annotate(f"roofline {fmt(r)}", (x + 0.42, r), fontsize=7, color=COLORS[3],
                        va="center")
            first = False
    ax.set_xticks(xs)
    ax.set_xticklabels(names)
    # Log scale only when the configurations differ by more than 20x (resident top-k against
    # offload at 32k tokens); plain numbers on the axis either way.
    log_scale = max(m + h for m, h in zip(med, hi)) > 20 * min(m - lo_ for m, lo_ in zip(med, lo))
    if log_scale:
        ax.set_yscale("log")
        from matplotlib.ticker import FuncFormatter
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("ms per decode token" + (" (log scale)" if log_scale else ""))
    ax.grid(axis="y", color="#dddddd")
    ax.set_axisbelow(True)
    kv = report.get("kv_bytes")
    ax.set_title(f"Decode with {report.get('context_tokens', '?')} tokens of context"
                 + (f" ({kv / 2**30:.2f} GiB of KV)" if isinstance(kv, (int, float)) else "")
                 + f": {report.get('model', '')}, {report.get('layers', '?')} layers",
                 fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8,
              frameon=False)
    extra = []
    if "offload_over_roofline" in report:
        extra.append(f"offload / roofline {report['offload_over_roofline']:.2f}")
    if "topk_over_resident" in report:
        extra.append(f"top-k / resident {report['topk_over_resident']:.2f}")
    note(fig, f"{report.get('tokens', '?')} measured tokens per configuration"
              + ("; " + ", ".join(extra) if extra else "") + "; kvtier bench decode --json")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ---------------------------------------------------------------------------------------------
# codec: kvtier bench codec --json (an array of rows keyed codec, data, ratio, encode_bytes_per_s,
# decode_bytes_per_s, rel_rmse, attn_cosine).

def codec_rows(report) -> list:
    """The rows: kvtier bench codec --json prints a JSON array of them ({"rows": [...]} too)."""
    what = "a kvtier bench codec --json report"
    rows = report.get("rows") if isinstance(report, dict) else report
    if not isinstance(rows, list) or not rows:
        raise PlotError(f"not {what}: no rows with a 'codec'")
    return rows


def plot_codec(plt, report):
    what = "a kvtier bench codec --json report"
    rows = codec_rows(report)
    codecs = list(dict.fromkeys(str(need(r, "codec", what)) for r in rows))
    datas = list(dict.fromkeys(str(r.get("data", "")) for r in rows))
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    fig, (ax_rmse, ax_cos) = plt.subplots(1, 2, figsize=(11, 4.8))
    floor = 1e-5  # Lossless rows (rel_rmse 0) sit on this line, labelled "exact".
    any_exact = False
    for r in rows:
        c, d = str(r["codec"]), str(r.get("data", ""))
        ratio = number(need(r, "ratio", what), f"{c}/{d}: ratio")
        style = dict(color=CODEC_COLORS[codecs.index(c) % len(CODEC_COLORS)],
                     marker=markers[datas.index(d) % len(markers)], s=55)
        if r.get("rel_rmse") is not None:
            e = number(r["rel_rmse"], f"{c}/{d}: rel_rmse")
            any_exact |= e <= 0
            ax_rmse.scatter([ratio], [max(e, floor)], **style)
        if r.get("attn_cosine") is not None:
            ax_cos.scatter([ratio], [number(r["attn_cosine"], f"{c}/{d}: attn_cosine")], **style)
    ax_rmse.set_yscale("log")
    if any_exact:
        ax_rmse.axhline(floor, color="#999999", linewidth=0.8, linestyle=":")
        ax_rmse.annotate("exact (lossless)", (0.98, floor), xycoords=("axes fraction", "data"),
                         fontsize=7, color="#666666", va="bottom", ha="right")
    ax_rmse.set_ylabel("relative RMSE (log scale, lower is better)")
    ax_cos.set_ylabel("attention-output cosine (higher is better)")
    for ax in (ax_rmse, ax_cos):
        ax.set_xlabel("compression ratio (original / stored bytes)")
        ax.grid(color="#dddddd")
        ax.set_axisbelow(True)
    # One legend for colours (codecs) and one for markers (data kinds).
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=CODEC_COLORS[i % len(CODEC_COLORS)], marker="o",
                      linestyle="", label=c) for i, c in enumerate(codecs)]
    handles += [Line2D([], [], color="#555555", marker=markers[i % len(markers)], linestyle="",
                       label=f"data: {d}") for i, d in enumerate(datas) if d]
    fig.legend(handles=handles, loc="lower center", ncol=min(6, len(handles)), fontsize=8,
               frameon=False)
    fig.suptitle("Codecs: compression ratio against quality", fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


# ---------------------------------------------------------------------------------------------
# ttft: bench/vllm_ttft.py --json.

TTFT_MODES = {"no_cache": "(a) no cache (recompute)",
              "vllm_prefix": "(b) vLLM prefix cache",
              "kvtier_host": "(c) kvtier host hit",
              "kvtier_ssd_restart": "(d) kvtier SSD hit after restart",
              "kvtier_ssd_codec_restart": "(d') the same, records encoded (--ssd-codec)"}
TTFT_COLORS = {"no_cache": "#d62728", "vllm_prefix": "#1f77b4", "kvtier_host": "#2ca02c",
               "kvtier_ssd_restart": "#ff7f0e", "kvtier_ssd_codec_restart": "#9467bd"}


def plot_ttft(plt, report):
    what = "a bench/vllm_ttft.py --json report"
    table = need(report, "table", what)
    if not isinstance(table, dict) or not table:
        raise PlotError(f"not {what}: 'table' is empty")
    try:
        lengths = sorted(table, key=int)
    except ValueError:
        raise PlotError(f"not {what}: 'table' keys are not token counts")
    # The modes the run measured ("modes"; --model-kind mla has no vLLM prefix cache), else all.
    listed = report.get("modes")
    modes = [m for m in TTFT_MODES if m in listed] if isinstance(listed, list) else \
        [m for m in TTFT_MODES if m != "kvtier_ssd_codec_restart" or m in table[lengths[0]]]
    if "no_cache" not in modes or len(modes) < 2:
        raise PlotError(f"not {what}: no recompute mode and a cache mode to compare it with")
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    for mode in modes:
        title = TTFT_MODES[mode]
        ys = [number(need(need(table[n], mode, what), "ttft_s_median", what),
                     f"{n} tokens, {mode}") for n in lengths]
        ax.plot([int(n) for n in lengths], ys, marker="o", color=TTFT_COLORS[mode], label=title,
                linewidth=2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([int(n) for n in lengths])
    ax.set_xticklabels(lengths)
    ax.minorticks_off()
    ax.set_xlabel("document length, tokens (log scale)")
    ax.set_ylabel("TTFT, seconds (log scale)")
    ax.grid(color="#dddddd", which="both")
    ax.set_axisbelow(True)
    s = report.get("setup", {})
    kind = {"mla": "DeepSeek-V2 (MLA) of ", "swa": "Gemma-3 (sliding window) of "}.get(
        s.get("model_kind"), "")
    fig.suptitle(f"vLLM time to first token (medians), CPU\nrandom-weight {kind}TinyLlama-1.1B "
                 f"shape, {s.get('layers', '?')} layers, bf16; documents sharing their first "
                 f"{s.get('shared_prefix_tokens', '?')} tokens", fontsize=10)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9, frameon=False)
    note(fig, "bench/vllm_ttft.py --json")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ---------------------------------------------------------------------------------------------
# mooncake: bench/peers/mooncake_store.py --json.

MOONCAKE_TITLES = {"mooncake": "Mooncake Store (TCP)",
                   "kvtier_redis_sealed": "kvtier remote (Redis, sealed)",
                   "kvtier_redis_plain": "kvtier remote (Redis, plaintext)",
                   "kvtier_host": "kvtier host tier"}


def plot_mooncake(plt, report):
    what = "a bench/peers/mooncake_store.py --json report"
    cells = need(report, "cells", what)
    systems = need(need(report, "config", what), "systems", what)
    if not isinstance(cells, dict) or not cells:
        raise PlotError(f"not {what}: 'cells' is empty")
    groups, series = [], {MOONCAKE_TITLES.get(s, s): [] for s in systems}
    for key, cell in cells.items():
        for op in ("put", "get"):
            groups.append(f"{op} {key}")
            for s in systems:
                v = need(need(cell, s, what), f"{op}_GBps_median", what)
                series[MOONCAKE_TITLES.get(s, s)].append(
                    None if v is None else number(v, f"{key} {s} {op}"))
    fig, ax = plt.subplots(figsize=(max(10, 1.15 * len(groups)), 4.8))
    grouped_bars(ax, groups, series, log_scale=True, unit="GB/s")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title("Mooncake Store vs kvtier on TCP loopback: median GB/s (higher is better)",
                 fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(series), frameon=False,
              fontsize=9)
    note(fig, "size x clients; 2 shared vCPUs; bench/peers/mooncake_store.py --json")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ---------------------------------------------------------------------------------------------
# llama: bench/peers/llama_prompt_cache.py --json.

def plot_llama(plt, report):
    what = "a bench/peers/llama_prompt_cache.py --json report"
    s = need(report, "summary", what)
    t = need(s, "ttft_ms_median", what)

    def ms(key):
        v = need(t, key, what)
        return None if v is None else number(v, key)

    groups = ["cold (computed)", "hit in process (RAM)", "hit in process (disk)",
              "hit after restart (disk/SSD)"]
    series = {"llama.cpp prompt cache": [ms("llama_cold_ms"), ms("llama_ram_hit_ms"),
                                         ms("llama_disk_hit_ms"),
                                         ms("llama_disk_restart_hit_ms")],
              "kvtier run": [ms("kvtier_cold_ms"), None, None, ms("kvtier_ssd_restart_hit_ms")]}
    tokens = need(s, "prompt_tokens", what)
    tokens = tokens.get("kvtier", "?") if isinstance(tokens, dict) else tokens
    fig, ax = plt.subplots(figsize=(9, 4.8))
    grouped_bars(ax, groups, series, log_scale=True, unit="ms")
    ax.set_title(f"TTFT of a repeated {tokens}-token prompt: median ms (lower is better)",
                 fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    note(fig, "stories260K.gguf; kvtier's CLI has no in-process hit; "
              "bench/peers/llama_prompt_cache.py --json")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ---------------------------------------------------------------------------------------------
# lmcache: bench/peers/lmcache_vllm.py --json.

LMCACHE_SHORT = {  # a comparison's measure -> its group label
    "hit from memory, same vLLM (in process)": "memory\n(in process)",
    "hit from memory, same vLLM (in process, no tier below)": "memory alone\n(in process)",
    "hit from memory, same vLLM (in process, SSD below, no Redis)": "memory + SSD\n(in process)",
    "hit from memory, same vLLM (through the cache service)": "memory\n(kvtier serve)",
    "hit after a vLLM restart, cache process kept": "vLLM restart,\nserver kept",
    "hit after a full restart, disk (LMCache fs)": "full restart,\ndisk (fs)",
    "hit after a full restart, disk (LMCache fs_native)": "full restart,\ndisk (fs_native)",
    "hit from Redis (kvtier sealed)": "Redis\n(kvtier sealed)",
    "hit from Redis (kvtier plaintext)": "Redis\n(kvtier plain)",
}


def plot_lmcache(plt, report):
    what = "a bench/peers/lmcache_vllm.py --json report"
    rows = need(report, "comparisons", what)
    cells = need(report, "cells", what)
    lengths = need(need(report, "config", what), "lengths", what)
    if not isinstance(rows, list) or not rows or not isinstance(lengths, list) or not lengths:
        raise PlotError(f"not {what}: 'comparisons' or 'lengths' is empty")
    if not isinstance(cells, dict) or not all(isinstance(r, dict) for r in rows):
        raise PlotError(f"not {what}: 'cells' or a row of 'comparisons' is not an object")

    def value(v, what_):
        return None if v is None else number(v, what_)

    fig, axes = plt.subplots(len(lengths), 1, figsize=(11, 1.2 + 3.4 * len(lengths)),
                             squeeze=False)
    for ax, n in zip(axes[:, 0], lengths):
        mine = [r for r in rows if need(r, "length", what) == n]
        groups = [LMCACHE_SHORT.get(need(r, "measure", what), r["measure"]) for r in mine]
        series = {"LMCache": [value(need(r, "lmcache_ttft_s", what), "lmcache_ttft_s")
                              for r in mine],
                  "kvtier": [value(need(r, "kvtier_ttft_s", what), "kvtier_ttft_s")
                             for r in mine]}
        grouped_bars(ax, groups, series, log_scale=True, unit="TTFT, s")
        for cell, style, label in (("recompute", "--", "recompute"),
                                   ("vllm_prefix", ":", "vLLM prefix cache")):
            per_length = cells.get(cell, {}).get("lengths", {}) if isinstance(
                cells.get(cell), dict) else {}
            v = per_length.get(str(n), {}).get("ttft_s_median") if isinstance(
                per_length.get(str(n)), dict) else None
            if v is not None:
                ax.axhline(number(v, cell), color="#555555", linestyle=style, linewidth=1,
                           label=label)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title(f"{n} tokens", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, 0.02))
    fig.suptitle("LMCache vs kvtier in the same vLLM (CPU): median TTFT of a hit, lower is better"
                 "\n(a missing bar: the cell failed its gate or did not run)", fontsize=11)
    note(fig, "2 shared vCPUs; bench/peers/lmcache_vllm.py --json")
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


# ---------------------------------------------------------------------------------------------
# serve: bench/serve_trace.py --json.

SERVE_TITLES = {"recompute": "recompute", "vllm_prefix": "vLLM prefix cache",
                "kvtier": "kvtier (in vLLM)", "kvtier_service": "kvtier serve",
                "lmcache": "LMCache server"}


def plot_serve(plt, report):
    what = "a bench/serve_trace.py --json report"
    rows = need(report, "rows", what)
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise PlotError(f"not {what}: 'rows' is empty or not a list of objects")
    modes, levels = [], []
    for r in rows:
        mode, level = need(r, "mode", what), need(r, "concurrency", what)
        if not isinstance(mode, str) or isinstance(level, bool) or not isinstance(level, int):
            raise PlotError(f"not {what}: a row's mode {mode!r} or concurrency {level!r} is not "
                            "a name and a whole number")
        if mode not in modes:
            modes.append(mode)
        if level not in levels:
            levels.append(level)
    levels.sort()

    def value(mode, level, key):
        """The row's figure, or None (no bar) for a row missing or failing its gate."""
        row = next((r for r in rows if r["mode"] == mode and r["concurrency"] == level), None)
        if row is None or row.get("correct") is not True:
            return None
        return number(need(row, key, what), f"{mode} at concurrency {level}: {key}")

    panels = (("ttft_p50_s", "TTFT p50, s", True), ("ttft_p99_s", "TTFT p99, s", True),
              ("output_tokens_per_s", "output tokens/s", False))
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 4.6), squeeze=False)
    groups = [f"concurrency {c}" for c in levels]
    for ax, (key, unit, log_scale) in zip(axes[0], panels):
        series = {SERVE_TITLES.get(m, m): [value(m, c, key) for c in levels] for m in modes}
        grouped_bars(ax, groups, series, log_scale=log_scale, unit=unit)
        ax.set_title(unit + (", lower is better" if log_scale else ", higher is better"),
                     fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(modes), frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, 0.04))
    trace = report.get("trace", {}) if isinstance(report.get("trace"), dict) else {}
    fig.suptitle(f"vllm serve under a chat trace ({trace.get('users', '?')} users x "
                 f"{trace.get('turns', '?')} turns, {trace.get('requests', '?')} requests), CPU"
                 "\n(a missing bar: the mode failed its gate against recompute's tokens)",
                 fontsize=11)
    setup = report.get("setup", {}) if isinstance(report.get("setup"), dict) else {}
    machine = f"{setup['cpus']} CPUs; " if isinstance(setup.get("cpus"), int) else ""
    note(fig, machine + "bench/serve_trace.py --json")
    fig.tight_layout(rect=(0, 0.1, 1, 0.93))
    return fig


KINDS = {"ssd": (plot_ssd, "the SSD tier against fio (bench/ssd_vs_fio.sh --json)"),
         "decode": (plot_decode, "decode ms per token against the roofline "
                                 "(kvtier bench decode --json)"),
         "codec": (plot_codec, "codec ratio against quality (kvtier bench codec --json)"),
         "ttft": (plot_ttft, "vLLM TTFT per mode and document length "
                             "(bench/vllm_ttft.py --json)"),
         "mooncake": (plot_mooncake, "Mooncake Store against kvtier "
                                     "(bench/peers/mooncake_store.py --json)"),
         "llama": (plot_llama, "llama.cpp's prompt cache against kvtier "
                               "(bench/peers/llama_prompt_cache.py --json)"),
         "lmcache": (plot_lmcache, "LMCache against kvtier in the same vLLM "
                                   "(bench/peers/lmcache_vllm.py --json)"),
         "serve": (plot_serve, "vllm serve under a chat trace, per mode and concurrency "
                               "(bench/serve_trace.py --json)")}


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="plot.py", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    for kind, (_, help_text) in KINDS.items():
        p = sub.add_parser(kind, help=help_text, description=help_text)
        p.add_argument("report", help="the benchmark's JSON report (- reads stdin)")
        p.add_argument("-o", "--output", required=True,
                       help="image to write; .png or .svg (the extension picks the format)")
    args = parser.parse_args()
    out = Path(args.output)
    if out.suffix.lower() not in (".png", ".svg"):
        parser.error(f"{args.output}: the output must end in .png or .svg")
    try:
        plt = import_pyplot()  # First: it may run the script again under /usr/bin/python3.
        report = load_report(args.report)
        fig = KINDS[args.kind][0](plt, report)
        try:
            # No timestamp or software version in the file: the same report gives the same bytes.
            meta = {"Software": None} if out.suffix.lower() == ".png" else {"Date": None}
            fig.savefig(out, dpi=110, metadata=meta)
        except OSError as e:
            raise PlotError(f"{args.output}: {e.strerror}")
        finally:
            plt.close(fig)
    except PlotError as e:
        print(f"plot.py {args.kind}: {e}", file=sys.stderr)
        return 1
    print(f"plot.py {args.kind}: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
