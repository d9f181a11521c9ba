# Weak and strong scaling: throughput and parallel efficiency per run of a scaling sweep.
"""Weak or strong scaling of sweeps: throughput and parallel efficiency per run.

Per run, over its timed steps (see below):
  ranks        phase_seconds.shape[1]; nodes: run.json's, else the distinct hostnames;
               threads: each rank's host threads (timings.h5 threads_per_rank), cores = ranks x threads
  tokens/step  global tokens per step (the `tokens` dataset)
  step s       median over timed steps of step_seconds_max (the slowest rank's step)
  tokens/s     tokens per step / step s
  TFLOP/s/rank tokens/s x model FLOPs per token (timings.h5 attribute flops_per_token: 6 x params
               + 12 L C T) / ranks
  efficiency   against the run with the fewest ranks N0 (the fastest of them if several):
                 weak:   TFLOP/s/rank(N) / TFLOP/s/rank(N0); with one model in every run this is
                         (tokens/s(N) / N) / (tokens/s(N0) / N0), and when the model grows with
                         the ranks (Megatron-LM 2019, jobs/weak_scaling.sh with CONFIGS) it is the
                         paper's definition: sustained FLOP/s per GPU against the smallest run
                 strong: (N0 x step s(N0)) / (N x step s(N)); all runs must share one global batch
--kind defaults to the sweeps' sweep.json experiment (weak_scaling or strong_scaling).
Writes scaling.csv, scaling.md and scaling.png (model TFLOP/s of all ranks and efficiency against
ranks, with the ideal lines) into --out and prints the Markdown table.

Timed steps: after the first --warmup steps (default 3), leaving out steps that wrote a checkpoint.
Failed, partial or unreadable runs are left out with a warning (--strict: an error).
"""
import argparse
import sys

import numpy as np
import pandas as pd

import trident_runs as tr

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


def table(runs, kind):
    rows = []
    for r in runs:
        step_s = float(np.median(r.timed_values("step_seconds_max")))
        tokens = float(np.median(r.timed_values("tokens")))
        rows.append({
            "run": r.name, "nodes": r.nodes, "ranks": r.ranks,
            "threads": r.threads_per_rank, "cores": r.ranks * r.threads_per_rank,
            "dp": r.cfg("parallel.dp"), "tp": r.cfg("parallel.tp"), "pp": r.cfg("parallel.pp"),
            "zero_stage": r.cfg("zero.stage"), "global_batch": r.cfg("train.batch_size"),
            "tokens_per_step": tokens, "timed_steps": int(r.timed.sum()),
            "median_step_s": step_s, "tokens_per_s": tokens / step_s,
            "parameters": int(r.attrs["parameters"]),
            "tflops_per_rank": tokens / step_s * float(r.attrs["flops_per_token"]) / r.ranks / 1e12,
            "run_dir": r.dir,
        })
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
    if kind == "weak":
        df["efficiency"] = df["tflops_per_rank"] / df.loc[base, "tflops_per_rank"]
    else:
        df["efficiency"] = (n0 * t0) / (df["ranks"] * df["median_step_s"])
    df["tflops"] = df["tflops_per_rank"] * df["ranks"]
    df["ideal_tflops"] = df.loc[base, "tflops_per_rank"] * df["ranks"]
    return df, df.loc[base, "run"]


def plot(df, kind, baseline, out_dir):
    plt = tr.pyplot()
    fig, (ax_thr, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.2))
    ranks = np.array(sorted(df["ranks"].unique()))
    ax_thr.plot(df["ranks"], df["tflops"], "o-", label="measured")
    ideal = df.groupby("ranks")["ideal_tflops"].first()
    ax_thr.plot(ideal.index, ideal.values, "--", color="grey",
                label=f"ideal (linear from {baseline})")
    ax_thr.set_yscale("log")
    ax_thr.set_ylabel("model TFLOP/s, all ranks")
    ax_thr.set_title(f"{kind} scaling: throughput")
    ax_eff.plot(df["ranks"], df["efficiency"], "o-", label="measured")
    ax_eff.axhline(1.0, ls="--", color="grey", label="ideal")
    ax_eff.set_ylabel("parallel efficiency")
    ax_eff.set_ylim(0, max(1.1, float(df["efficiency"].max()) * 1.1))
    ax_eff.set_title(f"{kind} scaling: efficiency")
    for ax in (ax_thr, ax_eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ranks)
        ax.set_xticklabels([str(n) for n in ranks])
        ax.set_xlabel("ranks")
        ax.grid(alpha=0.3)
        ax.legend()
    return tr.save_figure(fig, out_dir, "scaling.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_common_args(ap, paths_help="sweep directories (or run directories, timings.h5 files)",
                       metavar="SWEEP_DIR")
    ap.add_argument("--kind", choices=["weak", "strong"],
                    help="weak or strong scaling (default: from sweep.json's experiment)")
    args = ap.parse_args()
    runs = tr.load_runs(args.paths, strict=args.strict, warmup=args.warmup)
    kind = scaling_kind(args.kind, runs)
    df, baseline = table(runs, kind)
    out = tr.output_dir(args.out, runs)
    md_cols = ["run", "nodes", "ranks", "threads", "dp", "tp", "pp", "zero_stage", "parameters",
               "global_batch", "tokens_per_step", "timed_steps", "median_step_s", "tokens_per_s",
               "tflops_per_rank", "efficiency"]
    text = tr.write_table(df, out, "scaling", md_df=df[md_cols],
                          formats={"tokens_per_step": ".0f", "median_step_s": ".5f",
                                   "tokens_per_s": ".1f", "tflops_per_rank": ".4g",
                                   "efficiency": ".3f"})
    png = plot(df, kind, baseline, out)
    print(f"{kind} scaling, efficiency relative to {baseline} "
          f"({int(df['ranks'].min())} ranks), {args.warmup} warm-up steps left out\n")
    print(text)
    print(f"wrote {out}/scaling.csv, scaling.md, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
