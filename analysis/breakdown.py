# Phase breakdown of the step time per run (forward, backward, communication, optimizer, ...).
"""Where the step time goes: seconds per phase per run, as a table and a stacked bar chart.

PATH: sweep directories, run directories or timings.h5 files. Per run and phase (forward,
backward, recompute, tp_comm, pp_wait, dp_comm, optimizer, zero_gather, io), over the timed steps:
  <phase>_mean_s  median over timed steps of the mean over ranks of the phase's seconds
  <phase>_max_s   median over timed steps of the max over ranks
  median_step_s   median of step_seconds_max (the slowest rank's step)
  other_mean_s    median of step_seconds_max minus the sum of the phases' rank means: time in no
                  phase (bookkeeping, the loss reduction) plus the wait for the slowest rank
Writes breakdown.csv (seconds, every phase), breakdown.md (milliseconds, "mean / max" per phase
that is non-zero in some run) and breakdown.png (one stacked bar of rank means per run, the
median step time marked) into --out, and prints the Markdown table.

Timed steps: after the first --warmup steps (default 3), leaving out steps that wrote a checkpoint
(so io is normally 0 here). Failed, partial or unreadable runs are left out with a warning
(--strict: an error).
"""
import argparse
import sys

import numpy as np
import pandas as pd

import trident_runs as tr


def table(runs):
    rows = []
    phases = runs[0].phases
    for r in runs:
        if r.phases != phases:
            raise tr.AnalysisError(f"{r.dir}: phases {r.phases} differ from {runs[0].dir}'s")
        ps = r.data["phase_seconds"][r.timed]  # [timed steps, ranks, phases]
        step = r.timed_values("step_seconds_max")
        row = {"run": r.name, "ranks": r.ranks, "layout": r.layout,
               "timed_steps": int(r.timed.sum()), "median_step_s": float(np.median(step))}
        for i, p in enumerate(phases):
            row[f"{p}_mean_s"] = float(np.median(ps[:, :, i].mean(axis=1)))
            row[f"{p}_max_s"] = float(np.median(ps[:, :, i].max(axis=1)))
        row["other_mean_s"] = float(np.median(step - ps.mean(axis=1).sum(axis=1)))
        row["run_dir"] = r.dir
        rows.append(row)
    return pd.DataFrame(rows), phases


def markdown_frame(df, phases):
    md = df[["run", "ranks", "layout", "timed_steps"]].copy()
    md["step ms"] = [f"{v * 1e3:.3f}" for v in df["median_step_s"]]
    for p in phases:
        if (df[f"{p}_max_s"] > 0).any():
            md[f"{p} ms (mean / max)"] = [f"{a * 1e3:.3f} / {b * 1e3:.3f}"
                                          for a, b in zip(df[f"{p}_mean_s"], df[f"{p}_max_s"])]
    md["other ms"] = [f"{v * 1e3:.3f}" for v in df["other_mean_s"]]
    return md


def plot(df, phases, out_dir):
    plt = tr.pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(df) + 3), 4.8))
    x = np.arange(len(df))
    bottom = np.zeros(len(df))
    colors = plt.get_cmap("tab10")
    for i, p in enumerate(phases + ["other"]):
        ms = np.clip(df[f"{p}_mean_s"].to_numpy() * 1e3, 0, None)
        if not ms.any():
            continue
        ax.bar(x, ms, bottom=bottom, label=p, color=colors(i % 10),
               hatch="//" if p == "other" else None)
        bottom += ms
    ax.plot(x, df["median_step_s"] * 1e3, "k_", markersize=28, mew=2,
            label="median step (slowest rank)")
    ax.set_xticks(x)
    ax.set_xticklabels(df["run"], rotation=30, ha="right")
    ax.set_ylabel("ms per step (median over timed steps of the rank mean)")
    ax.set_title("step time by phase")
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return tr.save_figure(fig, out_dir, "breakdown.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_common_args(ap)
    args = ap.parse_args()
    runs = tr.load_runs(args.paths, strict=args.strict, warmup=args.warmup)
    df, phases = table(runs)
    out = tr.output_dir(args.out, runs)
    text = tr.write_table(df, out, "breakdown", md_df=markdown_frame(df, phases))
    png = plot(df, phases, out)
    print(f"phase times per step, ms: median over timed steps ({args.warmup} warm-up steps and "
          f"checkpoint steps left out) of the mean / max over ranks\n")
    print(text)
    print(f"wrote {out}/breakdown.csv, breakdown.md, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
