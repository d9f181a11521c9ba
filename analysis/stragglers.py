# Straggler scores per rank over the steps of trident runs: who computed slower than the others.
"""Straggler scores of trident runs, per rank, over the steps.

RUN_OR_SWEEP: run directories, sweep directories or timings.h5 files. trident scores every rank
each step: the fastest rank of its pipeline stage's median compute seconds over its own, in a
window of 20 steps (docs/checkpoints-and-faults.md, "Who lags"). This script plots, per run, each
rank's score against the step with the 0.75 threshold dashed, and writes stragglers.csv and
stragglers.md (per run and rank: its stage, the median and lowest score over the steps it judged, the
share of those steps under 0.75, and whether it is named: a median under 0.75) into --out, and
prints the Markdown table. Runs from before trident recorded scores are left out with a warning.
"""
import os
import sys

import trident_runs as tr

import numpy as np  # noqa: E402 (trident_runs checks the interpreter first)
import pandas as pd  # noqa: E402


def scored_runs(runs):
    kept = [r for r in runs if "straggler_score" in r.data]
    for r in runs:
        if r not in kept:
            tr.warn(f"{r.dir}: no straggler scores (trident before it recorded them); left out")
    if not kept:
        raise tr.AnalysisError("none of the runs has straggler scores")
    return kept


def stage_of(run, rank):
    """The pipeline stage of `rank`: trident orders ranks tp, cp, dp, pp (pp slowest)."""
    pp = int(run.cfg("parallel.pp", 1) or 1)
    return rank // max(run.ranks // pp, 1)


def table(runs):
    rows = []
    for r in runs:
        scores = r.data["straggler_score"]  # NaN where trident did not judge yet
        for rank in range(scores.shape[1]):
            s = scores[:, rank][~np.isnan(scores[:, rank])]
            median = float(np.median(s)) if len(s) else float("nan")
            rows.append({
                "run": r.name, "rank": rank, "stage": stage_of(r, rank), "steps": len(s),
                "median_score": median, "lowest_score": float(s.min()) if len(s) else float("nan"),
                "share_under": float((s < tr.STRAGGLER_SCORE).mean()) if len(s) else 0.0,
                "named": "yes" if median < tr.STRAGGLER_SCORE else "", "layout": r.layout})
    return pd.DataFrame(rows)


def plot(runs, out_dir):
    plt = tr.pyplot()
    cols = min(2, len(runs))
    rows = (len(runs) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.ravel()[len(runs):]:
        ax.set_visible(False)
    for ax, r in zip(axes.ravel(), runs):
        scores, steps = r.data["straggler_score"], r.data["step"]
        colors = plt.get_cmap("tab20")
        for rank in range(scores.shape[1]):
            ax.plot(steps, scores[:, rank], lw=1, color=colors(rank % 20), label=f"rank {rank}")
        ax.axhline(tr.STRAGGLER_SCORE, color="black", ls="--", lw=0.8)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("step")
        ax.set_ylabel("straggler score")
        ax.set_title(f"{r.name} ({r.layout})", fontsize=9)
        ax.grid(alpha=0.3)
        if scores.shape[1] <= 16:
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return tr.save_figure(fig, out_dir, "stragglers.png", runs,
                          notes=["dashed: 0.75, under which trident names a rank"])


def main():
    args, runs = tr.every_step_runs(
        __doc__, paths_help="run directories, sweep directories or timings.h5 files",
        metavar="RUN_OR_SWEEP")
    runs = scored_runs(runs)
    out = tr.output_dir(args.out, runs)
    df = table(runs)
    text = tr.write_table(df, out, "stragglers",
                          formats={"median_score": ".3f", "lowest_score": ".3f",
                                   "share_under": ".3f"})
    png = plot(runs, out)
    print(text)
    print(f"wrote {out}/stragglers.csv, stragglers.md, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
