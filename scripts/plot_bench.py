"""PNG plots of a benchmark suite run (`rmsnorm-bench --suite --json`) and of the peers' measured
points, for docs/PERFORMANCE.md:

    python scripts/plot_bench.py --baseline docs/results/h200-baseline.json \
        --peers docs/results/h200-peers.json --out docs/results/plots

fwd_pct_copy.png, add_pct_copy.png, bwd_pct_copy.png: rmsnorm's % of copy against N, per dtype,
at 2^26 elements (solid) and 2^23 elements (dashed), with the peers' bf16 points.
decode_us.png: bf16 GPU time per call against M at the decode widths, with the peers' points.
"""

import argparse
import io
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI or the GPU machine
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, NullFormatter  # noqa: E402
from PIL import Image  # noqa: E402  (a matplotlib dependency)

# Run as `python scripts/plot_bench.py`, Python puts scripts/ on the path, not the repository.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rmsnorm_tools import suite  # noqa: E402

# The suite's dtype names, as torch names them in the result rows.
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DTYPE_COLORS = {"bf16": "tab:blue", "fp16": "tab:orange", "fp32": "tab:green"}
PEER_MARKERS = {"quack": "o", "liger": "s", "flashinfer": "^", "compile": "D", "torch": "v"}
PEER_COLORS = {"quack": "tab:purple", "liger": "tab:red", "flashinfer": "tab:brown",
               "compile": "tab:olive", "torch": "tab:gray"}
WIDTH_COLORS = {2048: "tab:blue", 4096: "tab:orange", 8192: "tab:green"}
OP_TITLES = {"fwd": "Forward", "add": "Fused residual add + norm", "bwd": "Backward alone"}
# The peers' markers in this order, then rmsnorm's in the peers' run.
PEER_NAMES = list(PEER_MARKERS) + ["rmsnorm"]
SIZE = (8, 5)
DPI = 120


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def elements_of(row):
    """Which of the suite's throughput sizes a row is (2^26 or 2^23 elements), else None."""
    case = (row["M"], row["N"], row.get("timing", "median"))
    if case not in suite.throughput_shapes():  # the suite's rule of which size is timed how
        return None
    return next(e for e in suite.ELEMENTS if e // row["N"] == row["M"])


def is_decode(row):
    return (row.get("timing") == "graph" and row["M"] in suite.DECODE_ROWS
            and row["N"] in suite.DECODE_WIDTHS)


def dodged(x, i, step):
    """x nudged sideways on a log axis for the i-th of PEER_NAMES: peers measured at one shape
    are often within a point or a tenth of a microsecond of each other and would hide each
    other's markers."""
    return x * step ** (i - (len(PEER_NAMES) - 1) / 2)


def log2_axis(ax, ticks, minor=()):
    ax.set_xscale("log", base=2)
    # Labels at powers of two only: the widths in between (768, 2304, ...) sit too close to
    # label; they get unlabelled minor ticks.
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.set_xticklabels([f"{t // 1024}k" if t >= 16384 else str(t) for t in ticks])
    ax.xaxis.set_minor_locator(FixedLocator([t for t in minor if t not in ticks]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.15)


def save(fig, out, name):
    # Saved as a 256-colour palette PNG: a third of the RGBA file's size, the same to the eye
    # (the plots are a few flat colours), so the committed PNGs stay small.
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    path = os.path.join(out, name)
    Image.open(buf).convert("RGB").quantize(256).save(path, optimize=True)
    return path


def plot_pct_copy(op, baseline, peers, out):
    fig, ax = plt.subplots(figsize=SIZE)
    plotted = []
    for short in suite.DTYPES:
        for elements in suite.ELEMENTS:
            rows = sorted((r for r in baseline["rows"] if r["op"] == op
                           and r["dtype"] == DTYPE_NAMES[short] and elements_of(r) == elements),
                          key=lambda r: r["N"])
            if not rows:
                continue
            big = elements == max(suite.ELEMENTS)
            if short not in plotted:
                plotted.append(short)
            ax.plot([r["N"] for r in rows], [suite.pct_copy(r) for r in rows],
                    linestyle="-" if big else "--", marker=".", color=DTYPE_COLORS[short],
                    label=f"rmsnorm {short}, 2^{elements.bit_length() - 1} elements")
    # The peers' tables have forward and fused add at large batches (and forward + backward,
    # which is not the backward alone: it is left out of the backward plot).
    peer_rows = [r for r in peers["rows"] if r["op"] == op and r["timing"] == "median"]
    for i, name in enumerate(PEER_NAMES):
        points = [(dodged(r["N"], i, 2 ** 0.05), r["impls"][name]["pct_copy"])
                  for r in peer_rows if name in r["impls"]]
        if not points:
            continue
        if name == "rmsnorm":
            # rmsnorm in the peers' own run, at their shapes: the like-for-like point.
            ax.scatter(*zip(*points), marker="o", facecolors="none", edgecolors="black", s=50,
                       zorder=3, label="rmsnorm bf16, peers' run")
        else:
            ax.scatter(*zip(*points), marker=PEER_MARKERS[name], color=PEER_COLORS[name], s=36,
                       zorder=3, label=f"{name} bf16")
    log2_axis(ax, [2 ** k for k in range(7, 19)], suite.WIDTHS)
    # The copy itself.
    ax.axhline(100, color="black", linewidth=0.8, alpha=0.5)
    ax.set_ylim(0, max(105, ax.get_ylim()[1]))
    ax.set_xlabel("N (row width)")
    ax.set_ylabel("% of same-bytes device copy")
    ax.set_title(f"{OP_TITLES[op]}, {baseline.get('device', '?')}, {' / '.join(plotted)}: "
                 "rmsnorm's % of copy\n2^26 elements: median of do_bench (solid); 2^23 elements: "
                 "GPU time per call from CUDA-graph replays over inputs 3x the L2 (dashed)",
                 fontsize=10)
    legend_title = None
    if peer_rows:
        legend_title = (f"markers: peers, one run ({peers.get('date', '?')}),\n"
                        "median of do_bench, at the M x N\nof their rows in the peers' JSON")
    elif op == "bwd":
        legend_title = "no peers: they were measured\nonly as forward + backward"
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title=legend_title,
              title_fontsize=8)
    return save(fig, out, f"{op}_pct_copy.png")


def plot_decode(baseline, peers, out):
    fig, axes = plt.subplots(1, 2, figsize=SIZE, sharey=True)
    peer_rows = [r for r in peers["rows"] if r["timing"] == "graph"]
    for ax, op in zip(axes, suite.DECODE_OPS):
        for n in suite.DECODE_WIDTHS:
            rows = sorted((r for r in baseline["rows"] if r["op"] == op and r["N"] == n
                           and r["dtype"] == DTYPE_NAMES["bf16"] and is_decode(r)),
                          key=lambda r: r["M"])
            ax.plot([r["M"] for r in rows], [r["impls"]["rmsnorm"]["us"] for r in rows],
                    marker=".", color=WIDTH_COLORS[n], label=f"rmsnorm, N = {n}")
        # A peer's marker takes the colour of its N's line, its shape says which peer.
        for r in (r for r in peer_rows if r["op"] == op):
            for i, name in enumerate(PEER_NAMES):
                if name not in r["impls"]:
                    continue
                x = dodged(r["M"], i, 2 ** 0.12)
                color = WIDTH_COLORS.get(r["N"], "black")
                if name == "rmsnorm":
                    ax.scatter(x, r["impls"][name]["us"], marker="o", s=50, zorder=3,
                               facecolors="none", edgecolors=color)
                else:
                    ax.scatter(x, r["impls"][name]["us"], marker=PEER_MARKERS[name], s=36,
                               zorder=3, color=color)
        log2_axis(ax, list(suite.DECODE_ROWS))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("M (rows)")
        ax.set_title(OP_TITLES[op], fontsize=10)
    axes[0].set_ylabel("GPU time per call (µs)")
    # Legend: the lines, then one grey entry per peer marker shape.
    handles, labels = axes[0].get_legend_handles_labels()
    for name, marker in PEER_MARKERS.items():
        handles.append(axes[0].scatter([], [], marker=marker, color="dimgray"))
        labels.append(name)
    handles.append(axes[0].scatter([], [], marker="o", facecolors="none", edgecolors="dimgray"))
    labels.append("rmsnorm, peers' run")
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.88), fontsize=8,
               title="markers: peers (colour: their N),\nanother run, 20 calls per graph",
               title_fontsize=8)
    fig.suptitle(f"Decode, {baseline.get('device', '?')}, bf16: GPU time per call from "
                 "CUDA-graph replays\n(rmsnorm: suite baseline, 100 calls per graph)", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "decode_us.png")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="suite run JSON (rmsnorm-bench --suite)")
    parser.add_argument("--peers", required=True, help="peers' measured points JSON")
    parser.add_argument("--out", required=True, help="folder for the PNGs")
    args = parser.parse_args(argv)
    baseline, peers = load(args.baseline), load(args.peers)
    os.makedirs(args.out, exist_ok=True)
    written = [plot_pct_copy(op, baseline, peers, args.out) for op in suite.OPS]
    written.append(plot_decode(baseline, peers, args.out))
    for path in written:
        print(path)
    return written


if __name__ == "__main__":
    main()
