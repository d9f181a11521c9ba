# Phase breakdown of the step time per run (forward, backward, communication, optimizer, ...).
"""Where the step time goes: seconds per phase per run, as a table and a stacked bar chart.

PATH: sweep directories, run directories or timings.h5 files. One row per layout: its repeats
(same layout name, ranks, threads, nodes and config, see trident_runs) are aggregated, each
number below the median over the repeats of the run's value. Per run and phase (forward,
backward, recompute, tp_comm, pp_wait, dp_comm, optimizer, zero_gather, io, weight_grad, ep_comm,
cp_comm), over
the timed steps:
  <phase>_mean_s  median over timed steps of the mean over ranks of the phase's seconds
  <phase>_max_s   median over timed steps of the max over ranks
  median_step_s   median of step_seconds_max (the slowest rank's step); step_s_min, step_s_max:
                  the min-max spread over the repeats; repeats: how many runs
  other_mean_s    median of step_seconds_max minus the sum of the phases' rank means: time in no
                  phase (bookkeeping, the loss reduction) plus the wait for the slowest rank
Writes breakdown.csv (seconds, every phase), breakdown.md (milliseconds, "mean / max" per phase
that is drawn) and breakdown.png (one stacked bar of rank means per layout, the median step time
marked with its min-max spread) into --out, and prints the Markdown table. A phase whose rank
mean is below 0.1% of the longest step in every row (pp_wait without a pipeline: timer noise)
is neither drawn nor tabulated in Markdown; the CSV keeps it.

Timed steps: after the first --warmup steps (default 3), leaving out steps that wrote a checkpoint
(so io is normally 0 here). Failed, partial or unreadable runs are left out with a warning
(--strict: an error).
"""
import argparse
import sys

import trident_runs as tr

import numpy as np  # noqa: E402 (trident_runs checks the interpreter first)
import pandas as pd  # noqa: E402

# One colour per phase, the same in every figure; "other" is grey and hatched.
PHASE_COLORS = {"forward": "tab:blue", "backward": "tab:orange", "recompute": "tab:green",
                "tp_comm": "tab:red", "pp_wait": "tab:purple", "dp_comm": "tab:brown",
                "optimizer": "tab:pink", "zero_gather": "tab:olive", "io": "tab:cyan",
                "weight_grad": "#393b79", "ep_comm": "#e7ba52", "cp_comm": "#843c39",
                "other": "#c7c7c7"}
SPARE_COLORS = ("#8c6d31", "#e7969c", "#7b4173", "#637939", "#17becf")
NEGLIGIBLE = 1e-3  # of the longest step: a phase below it in every row is not drawn


def run_values(r, phases):
    """One run's medians over its timed steps."""
    ps = r.data["phase_seconds"][r.timed]  # [timed steps, ranks, phases]
    step = r.timed_values("step_seconds_max")
    values = {"median_step_s": float(np.median(step))}
    for i, p in enumerate(phases):
        values[f"{p}_mean_s"] = float(np.median(ps[:, :, i].mean(axis=1)))
        values[f"{p}_max_s"] = float(np.median(ps[:, :, i].max(axis=1)))
    values["other_mean_s"] = float(np.median(step - ps.mean(axis=1).sum(axis=1)))
    return values


def table(runs):
    rows = []
    phases = runs[0].phases
    for r in runs:
        if r.phases != phases:
            raise tr.AnalysisError(f"{r.dir}: phases {r.phases} differ from {runs[0].dir}'s")
    for g in tr.group_runs(runs):
        per_run = [run_values(r, phases) for r in g.runs]
        steps = [v["median_step_s"] for v in per_run]
        row = {"run": g.label, "ranks": g.first.ranks, "layout": g.first.layout,
               "repeats": g.repeats, "timed_steps": int(sum(r.timed.sum() for r in g.runs)),
               "median_step_s": float(np.median(steps)), "step_s_min": float(min(steps)),
               "step_s_max": float(max(steps))}
        for key in per_run[0]:
            if key != "median_step_s":
                row[key] = float(np.median([v[key] for v in per_run]))
        row["run_dir"] = g.run_dirs
        rows.append(row)
    return pd.DataFrame(rows), phases


def drawn(df, phases):
    """The phases (and "other") worth a bar: above NEGLIGIBLE of the longest step somewhere."""
    floor = NEGLIGIBLE * float(df["median_step_s"].max())
    return [p for p in phases + ["other"] if (df[f"{p}_mean_s"] > floor).any()]


def markdown_frame(df, phases):
    md = df[["run", "ranks", "layout", "repeats", "timed_steps"]].copy()
    md["step ms (min-max)"] = [f"{v * 1e3:.3f}" + (f" ({a * 1e3:.3f}-{b * 1e3:.3f})" if n > 1
                                                   else "")
                               for v, a, b, n in zip(df["median_step_s"], df["step_s_min"],
                                                     df["step_s_max"], df["repeats"])]
    shown = drawn(df, phases)
    for p in phases:
        if p in shown:
            md[f"{p} ms (mean / max)"] = [f"{a * 1e3:.3f} / {b * 1e3:.3f}"
                                          for a, b in zip(df[f"{p}_mean_s"], df[f"{p}_max_s"])]
    md["other ms"] = [f"{v * 1e3:.3f}" for v in df["other_mean_s"]]
    return md


def colors(names):
    spare = iter(SPARE_COLORS * 4)
    return {p: PHASE_COLORS.get(p) or next(spare) for p in names}


def plot(df, phases, runs, out_dir):
    plt = tr.pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(df) + 3), 4.8))
    x = np.arange(len(df))
    bottom = np.zeros(len(df))
    shown = drawn(df, phases)
    color = colors(shown)
    for p in shown:
        ms = np.clip(df[f"{p}_mean_s"].to_numpy() * 1e3, 0, None)
        ax.bar(x, ms, bottom=bottom, label=p, color=color[p],
               hatch="//" if p == "other" else None, edgecolor="white" if p == "other" else None)
        bottom += ms
    step = df["median_step_s"].to_numpy() * 1e3
    spread = [step - df["step_s_min"].to_numpy() * 1e3, df["step_s_max"].to_numpy() * 1e3 - step]
    repeated = bool((df["repeats"] > 1).any())
    ax.errorbar(x, step, yerr=spread if repeated else None, fmt="_", color="black",
                markersize=28, mew=2, capsize=6,
                label="median step (slowest rank)" + (", min-max over repeats" if repeated
                                                      else ""))
    ax.set_xticks(x)
    ax.set_xticklabels(df["run"], rotation=30, ha="right")
    ax.set_ylabel("ms per step (median over timed steps of the rank mean)")
    ax.set_title("step time by phase")
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    left_out = [p for p in phases if p not in shown]
    notes = [tr.repeats_note(df["repeats"], point="bar")]
    if left_out:
        notes.append(f"not drawn (below {NEGLIGIBLE:.1%} of the longest step in every row): "
                     f"{', '.join(left_out)}")
    return tr.save_figure(fig, out_dir, "breakdown.png", runs, notes=notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_common_args(ap)
    args = ap.parse_args()
    runs = tr.load_runs(args.paths, strict=args.strict, warmup=args.warmup,
                        allow_mixed_provenance=args.allow_mixed_provenance)
    df, phases = table(runs)
    out = tr.output_dir(args.out, runs)
    text = tr.write_table(df, out, "breakdown", md_df=markdown_frame(df, phases))
    png = plot(df, phases, runs, out)
    print(f"phase times per step, ms: median over timed steps ({args.warmup} warm-up steps and "
          f"checkpoint steps left out) of the mean / max over ranks; the repeats of a layout: "
          f"the median of their medians, the step time's spread min-max\n")
    print(text)
    print(f"wrote {out}/breakdown.csv, breakdown.md, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
