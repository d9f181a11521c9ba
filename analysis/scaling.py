# Weak and strong scaling: throughput and parallel efficiency per run of a scaling sweep.
"""Weak or strong scaling of sweeps: throughput and parallel efficiency per run.

One row per layout: its repeats (same layout name, ranks, threads, nodes and config; from one
sweep or several, see trident_runs) are aggregated. Per row, over each run's timed steps:
  ranks        phase_seconds.shape[1]; nodes: run.json's, else the distinct hostnames;
               threads: each rank's host threads (timings.h5 threads_per_rank), cores = ranks x threads
  tokens/step  global tokens per step (the `tokens` dataset)
  step s       median_step_s: the median over the repeats of each run's step time, the median
               over its timed steps of step_seconds_max (the slowest rank's step);
               step_s_min, step_s_max: the spread (min-max over the repeats of the runs' step
               times); repeats: how many runs; timed_steps: their timed steps together
  tokens/s     tokens per step / step s (tokens_per_s_min, _max from step_s_max, _min)
  TFLOP/s/rank tokens/s x model FLOPs per token (timings.h5 attribute flops_per_token: 6 x params
               + 12 L C T) / ranks
  drift        what makes the row's numbers suspect: a rank whose median straggler score over
               the timed steps is under 0.75 (the machine under it loaded or throttled), and
               repeats whose compute seconds (the slowest rank's compute phases, median over
               timed steps) are more than 10% apart; empty when neither
  efficiency   from the aggregated medians, against the row with the fewest ranks N0 (the
               fastest of them if several); efficiency_min, _max: this row's spread against N0's
               median:
                 weak:   TFLOP/s/rank(N) / TFLOP/s/rank(N0); with one model in every run this is
                         (tokens/s(N) / N) / (tokens/s(N0) / N0), and when the model grows with
                         the ranks (Megatron-LM 2019, jobs/weak_scaling.sh with CONFIGS) it is the
                         paper's definition: sustained FLOP/s per GPU against the smallest run
                 strong: (N0 x step s(N0)) / (N x step s(N)); all runs must share one global batch
--kind defaults to the sweeps' sweep.json experiment (weak_scaling or strong_scaling).
Writes scaling.csv, scaling.md and scaling.png (model FLOP/s of all ranks and efficiency against
ranks, min-max error bars over repeats, the ideal lines; weak scaling: the model size at each
point) into --out and prints the Markdown table.

Timed steps: after the first --warmup steps (default 3), leaving out steps that wrote a checkpoint.
Failed, partial or unreadable runs are left out with a warning (--strict: an error).
"""
import argparse
import sys

import trident_runs as tr

import numpy as np  # noqa: E402 (trident_runs checks the interpreter first)
import pandas as pd  # noqa: E402

KINDS = {"weak_scaling": "weak", "strong_scaling": "strong"}


def scaling_kind(requested, runs):
    if requested:
        return requested
    experiments = sorted({r.sweep.get("experiment", "") for r in runs})
    kinds = {KINDS.get(e) for e in experiments}
    if len(kinds) == 1 and None not in kinds:
        return kinds.pop()
    shown = ", ".join(repr(e) if e else "none (no sweep.json)" for e in experiments)
    raise tr.AnalysisError(f"--kind weak|strong is required: the sweeps' experiment is {shown}, "
                           f"not one of {', '.join(KINDS)}")


def row(group):
    r = group.first
    step_s, step_min, step_max = group.spread(tr.Run.median_step_s)
    tokens, _, _ = group.spread(lambda run: np.median(run.timed_values("tokens")))
    flops = tokens * r.flops_per_token / r.ranks / 1e12  # TFLOP per rank per step
    return {
        "run": group.label, "nodes": r.nodes, "ranks": r.ranks,
        "threads": r.threads_per_rank, "cores": r.ranks * r.threads_per_rank,
        "dp": r.cfg("parallel.dp"), "tp": r.cfg("parallel.tp"), "pp": r.cfg("parallel.pp"),
        "zero_stage": r.cfg("zero.stage"), "global_batch": r.cfg("train.batch_size"),
        "tokens_per_step": tokens, "repeats": group.repeats,
        "timed_steps": int(sum(run.timed.sum() for run in group.runs)),
        "median_step_s": step_s, "step_s_min": step_min, "step_s_max": step_max,
        "tokens_per_s": tokens / step_s, "tokens_per_s_min": tokens / step_max,
        "tokens_per_s_max": tokens / step_min, "parameters": r.parameters,
        "tflops_per_rank": flops / step_s, "tflops_per_rank_min": flops / step_max,
        "tflops_per_rank_max": flops / step_min, "drift": tr.drift_note(group),
        "sweeps": group.sweeps, "run_dir": group.run_dirs,
    }


def table(runs, kind):
    rows = [row(g) for g in tr.group_runs(runs)]
    df = pd.DataFrame(rows).sort_values(["ranks", "run"], kind="stable").reset_index(drop=True)
    if kind == "strong":
        batches = df.groupby("tokens_per_step")["run"].apply(list)
        if len(batches) > 1:
            shown = "; ".join(f"{int(b)} tokens: {', '.join(names)}"
                              for b, names in batches.items())
            raise tr.AnalysisError(f"strong scaling needs one global batch, the runs have "
                                   f"{len(batches)}: {shown}")
    n0 = df["ranks"].min()
    base = df[df["ranks"] == n0]["tflops_per_rank"].idxmax()
    t0 = df.loc[base, "median_step_s"]
    for suffix, step in (("", "median_step_s"), ("_min", "step_s_max"), ("_max", "step_s_min")):
        if kind == "weak":
            df["efficiency" + suffix] = (df["tflops_per_rank" + suffix]
                                         / df.loc[base, "tflops_per_rank"])
        else:
            df["efficiency" + suffix] = (n0 * t0) / (df["ranks"] * df[step])
        df["tflops" + suffix] = df["tflops_per_rank" + suffix] * df["ranks"]
    df["ideal_tflops"] = df.loc[base, "tflops_per_rank"] * df["ranks"]
    return df, df.loc[base, "run"]


def series(df):
    """[(label, rows)]: one line per layout shape (tp, pp, threads), split further by sweeps
    where a shape has several rows at one rank count."""
    keys = ["tp", "pp", "threads"]
    varying = [k for k in keys if df[k].nunique() > 1]
    out = []
    for values, rows in df.groupby(keys, sort=False):
        shape = " ".join(f"{k}={v}" for k, v in zip(keys, values) if k in varying)
        parts = [(shape, rows)]
        if rows["ranks"].duplicated().any():
            parts = [(f"{shape} sweep {sweeps}".strip(), sub)
                     for sweeps, sub in rows.groupby("sweeps", sort=False)]
        out += parts
    return out


def unit(df):
    """(scale, name) for the throughput axis: TFLOP/s, or GFLOP/s below 1 TFLOP/s."""
    return (1.0, "TFLOP/s") if df["tflops"].max() >= 1 else (1e3, "GFLOP/s")


def plot(df, kind, runs, out_dir):
    plt = tr.pyplot()
    fig, (ax_thr, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.4))
    scale, name = unit(df)
    lines = series(df)
    for i, (label, rows) in enumerate(lines):
        rows = rows.sort_values("ranks")
        color = plt.get_cmap("tab10")(i % 10)
        label = label or "measured"
        for ax, y in ((ax_thr, "tflops"), (ax_eff, "efficiency")):
            mid = rows[y].to_numpy() * (scale if y == "tflops" else 1)
            low = rows[y + "_min"].to_numpy() * (scale if y == "tflops" else 1)
            high = rows[y + "_max"].to_numpy() * (scale if y == "tflops" else 1)
            ax.errorbar(rows["ranks"], mid, yerr=[mid - low, high - mid], fmt="o-", color=color,
                        capsize=4, label=label)
        if kind == "weak":
            for n, y, params in zip(rows["ranks"], rows["tflops"] * scale, rows["parameters"]):
                ax_thr.annotate(f"{tr.human(params)} params", (n, y), textcoords="offset points",
                                xytext=(6, -12), fontsize=7, color=color)
    ideal = df.groupby("ranks")["ideal_tflops"].first() * scale
    ax_thr.plot(ideal.index, ideal.values, "--", color="grey", label="ideal")
    ax_thr.set_yscale("log")
    tr.plain_ticks(ax_thr, "y", list(ideal.values) + list(df["tflops_min"] * scale)
                   + list(df["tflops_max"] * scale))
    ax_thr.set_ylabel(f"model {name}, all ranks")
    ax_thr.set_title(f"{kind} scaling: throughput")
    ax_eff.axhline(1.0, ls="--", color="grey", label="ideal")
    ax_eff.set_ylabel("parallel efficiency")
    ax_eff.set_ylim(0, max(1.1, float(df["efficiency_max"].max()) * 1.1))
    ax_eff.set_title(f"{kind} scaling: efficiency")
    for ax in (ax_thr, ax_eff):
        tr.rank_ticks(ax, df["ranks"])
        ax.set_xlabel("ranks")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return tr.save_figure(fig, out_dir, "scaling.png", runs, notes=[tr.repeats_note(df["repeats"])])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_common_args(ap, paths_help="sweep directories (or run directories, timings.h5 files)",
                       metavar="SWEEP_DIR")
    ap.add_argument("--kind", choices=["weak", "strong"],
                    help="weak or strong scaling (default: from sweep.json's experiment)")
    args = ap.parse_args()
    runs = tr.load_runs(args.paths, strict=args.strict, warmup=args.warmup,
                        allow_mixed_provenance=args.allow_mixed_provenance)
    kind = scaling_kind(args.kind, runs)
    df, baseline = table(runs, kind)
    out = tr.output_dir(args.out, runs)
    md_cols = ["run", "nodes", "ranks", "threads", "dp", "tp", "pp", "zero_stage", "parameters",
               "global_batch", "tokens_per_step", "repeats", "timed_steps", "median_step_s",
               "step_s_min", "step_s_max", "tokens_per_s", "tflops_per_rank", "efficiency",
               "drift"]
    text = tr.write_table(df, out, "scaling", md_df=df[md_cols],
                          formats={"tokens_per_step": ".0f", "median_step_s": ".5f",
                                   "step_s_min": ".5f", "step_s_max": ".5f",
                                   "tokens_per_s": ".1f", "tflops_per_rank": ".4g",
                                   "efficiency": ".3f"})
    png = plot(df, kind, runs, out)
    print(f"{kind} scaling, efficiency relative to {baseline} "
          f"({int(df['ranks'].min())} ranks), {args.warmup} warm-up steps left out; step s: "
          f"median over repeats of each run's median step time (slowest rank), spread min-max\n")
    print(text)
    print(f"wrote {out}/scaling.csv, scaling.md, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
