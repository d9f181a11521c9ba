# Measured pipeline bubbles (trident timings.h5) next to theory and the schedule model.
"""Measured pipeline bubbles per run next to theory and the schedule model.

PATH: sweep directories, run directories or timings.h5 files. Per run it reads the resolved
config (the file's `config` attribute) for pp, the schedule, virtual_stages, the batch and
micro-batch sizes, and reports over the timed steps:
  bubble(mean)  median of the `bubble` dataset: mean over ranks of pp_wait / step time, where
                step time is the slowest rank's (step_seconds_max);
  bubble(max)   median of max over ranks of pp_wait / step_seconds_max;
  theory        (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) for interleaved; for zb_h1
                the paper's (p-1)(F+B-W) / (m(F+B+W) + (p-1)(F+B-W)) with the run's own
                per-micro-batch times: F = forward, B = backward (the input-gradient passes),
                W = weight_grad phase seconds / m, means over ranks;
  simulated     1 - m v (F+B+W) / makespan from a port of tests/unit/schedule_simulator.cpp's
                simulator (zero-latency transfers; forward 1 unit and backward 2, or for zb_h1
                the run's F, B and W).
Repeats of a layout (see trident_runs) make one row: the median over the repeats of each run's
value (bubble_mean_min, _max: the spread of bubble(mean)). Runs with pp = 1 have no pipeline
(theory and model 0); they are left out and named unless --include-pp1. Timed steps: after the
first --warmup steps (default 3), leaving out steps that wrote a checkpoint (io phase > 0 on a
rank: a checkpoint inflates the step time and so deflates the bubble). Failed, partial or
unreadable runs are left out with a warning (--strict: an error). Prints the table and notes, and
writes bubble.csv, bubble.md and bubble.png (measured against theory and model per layout; the
oversubscription caveat, when there is one, printed on the figure too) into --out.
"""
import argparse
import os
import sys

import trident_runs as tr

import numpy as np  # noqa: E402 (trident_runs checks the interpreter first)
import pandas as pd  # noqa: E402


# ---- port of src/parallel/pipeline/schedule.cpp (action lists) and tests/unit/schedule_simulator.cpp ----

def gpipe(m):
    return [("F", mb, 0) for mb in range(m)] + [("B", mb, 0) for mb in range(m)]


def one_f_one_b(pp, rank, m):
    warmup = min(pp - rank - 1, m)
    out = [("F", mb, 0) for mb in range(warmup)]
    for i in range(m - warmup):
        out += [("F", warmup + i, 0), ("B", i, 0)]
    return out + [("B", mb, 0) for mb in range(m - warmup, m)]


def interleaved_action(pp, v, k, kind):
    in_group = (k // pp) % v
    chunk = in_group if kind == "F" else v - 1 - in_group
    return (kind, (k // (pp * v)) * pp + k % pp, chunk)


def interleaved(pp, rank, m, v):
    total = m * v
    warmup = min((pp - rank - 1) * 2 + (v - 1) * pp, total)
    out = [interleaved_action(pp, v, k, "F") for k in range(warmup)]
    for k in range(total - warmup):
        out += [interleaved_action(pp, v, warmup + k, "F"), interleaved_action(pp, v, k, "B")]
    return out + [interleaved_action(pp, v, k, "B") for k in range(total - warmup, total)]


def zero_bubble_h1(pp, rank, m):
    """1F1B's forwards and input-gradient passes ("I"); rank r keeps r weight passes ("W")
    pending."""
    warmup = min(pp - rank - 1, m)
    out, pending = [("F", mb, 0) for mb in range(warmup)], []

    def input_grad(mb):
        out.append(("I", mb, 0))
        pending.append(mb)
        if len(pending) > rank:
            out.append(("W", pending.pop(0), 0))
    for i in range(m - warmup):
        out.append(("F", warmup + i, 0))
        input_grad(i)
    for mb in range(m - warmup, m):
        input_grad(mb)
    return out + [("W", mb, 0) for mb in pending]


def make_schedule(kind, pp, rank, m, v):
    if kind == "gpipe":
        return gpipe(m)
    if kind == "1f1b":
        return one_f_one_b(pp, rank, m)
    if kind == "zb_h1":
        return zero_bubble_h1(pp, rank, m)
    return interleaved(pp, rank, m, v)


def simulated_bubble(kind, pp, m, v, costs=(1.0, 1.0, 1.0)):
    """1 - m v (F+B+W) / makespan; blocking receives, non-blocking zero-latency sends. costs:
    (F, B, W) per pass; a fused backward ("B") costs B + W."""
    t_f, t_b, t_w = costs
    lists = [make_schedule(kind, pp, r, m, v) for r in range(pp)]
    stages = pp * v
    fwd_end, bwd_end = {}, {}
    nxt, clock = [0] * pp, [0] * pp
    progress = True
    while progress:
        progress = False
        for r in range(pp):
            while nxt[r] < len(lists[r]):
                kind_, mb, chunk = lists[r][nxt[r]]
                stage = chunk * pp + r
                ready = clock[r]
                if kind_ == "F" and stage > 0:
                    if (stage - 1, mb) not in fwd_end:
                        break
                    ready = max(ready, fwd_end[(stage - 1, mb)])
                elif kind_ in "BI" and stage < stages - 1:
                    if (stage + 1, mb) not in bwd_end:
                        break
                    ready = max(ready, bwd_end[(stage + 1, mb)])
                clock[r] = ready + {"F": t_f, "B": t_b + t_w, "I": t_b, "W": t_w}[kind_]
                if kind_ != "W":
                    (fwd_end if kind_ == "F" else bwd_end)[(stage, mb)] = clock[r]
                nxt[r] += 1
                progress = True
    if any(nxt[r] < len(lists[r]) for r in range(pp)):
        raise RuntimeError(f"schedule {kind} pp={pp} m={m} v={v} deadlocks in the port")
    return 1.0 - m * v * (t_f + t_b + t_w) / max(clock)


def theory(kind, pp, m, v, costs=(1.0, 1.0, 1.0)):
    if kind == "zb_h1":  # Qi et al. 2024: (p-1)(F+B-W) idle per rank
        t_f, t_b, t_w = costs
        idle = (pp - 1) * (t_f + t_b - t_w)
        return idle / (m * (t_f + t_b + t_w) + idle)
    return (pp - 1) / ((v if kind == "interleaved" else 1) * m + pp - 1)


# The port must agree with the C++ model's unit tests (tests/unit/test_schedule.cpp).
assert abs(simulated_bubble("1f1b", 4, 8, 1) - 3 / 11) < 1e-12
assert abs(simulated_bubble("interleaved", 4, 8, 2) - 3 / 19) < 1e-12
assert simulated_bubble("1f1b", 1, 8, 1) == 0.0
assert abs(simulated_bubble("zb_h1", 4, 8, 1) - 3 / 27) < 1e-12
assert abs(simulated_bubble("zb_h1", 4, 8, 1, (1, 1.2, 0.9)) - theory("zb_h1", 4, 8, 1, (1, 1.2, 0.9))) < 1e-12


# ---- measurements ----

def read_run(run):
    par, train = run.config["parallel"], run.config["train"]
    pp, dp = par["pp"], par["dp"]
    kind = par["schedule"]
    v = par["virtual_stages"] if kind == "interleaved" else 1
    m = train["batch_size"] // dp // train["micro_batch_size"]
    timed = run.timed
    step_max = run.timed_values("step_seconds_max")
    wait = run.phase("pp_wait")[timed]
    # Per-micro-batch pass times (means over ranks, medians over steps): zb_h1's theory and model
    # depend on them; the others' do not.
    costs = (1.0, 1.0, 1.0)
    if kind == "zb_h1":
        costs = tuple(float(np.median(run.phase(p)[timed].mean(axis=1))) / m
                      for p in ("forward", "backward", "weight_grad"))
    return {
        "run": run.name, "pp": pp, "m": m, "kind": kind, "v": v, "L": run.cfg("model.n_layer"),
        "dp": dp, "tp": par["tp"], "micro": train["micro_batch_size"], "ranks": run.ranks,
        "ranks_per_node": -(-run.ranks // run.nodes),
        "n_timed": int(timed.sum()), "step_s": float(np.median(step_max)),
        "mean": float(np.median(run.timed_values("bubble"))),
        "max": float(np.median(wait.max(axis=1) / step_max)),
        "theory": theory(kind, pp, m, v, costs), "sim": simulated_bubble(kind, pp, m, v, costs),
        "costs": costs, "run_dir": run.dir,
    }


def aggregate(group):
    """One row for a group of repeats: medians over the runs, bubble(mean)'s min-max."""
    per = [read_run(r) for r in group.runs]
    row = dict(per[0])
    for key in ("step_s", "mean", "max"):
        row[key] = float(np.median([p[key] for p in per]))
    row["mean_min"] = min(p["mean"] for p in per)
    row["mean_max"] = max(p["mean"] for p in per)
    if row["kind"] == "zb_h1":
        row["costs"] = tuple(float(np.median([p["costs"][i] for p in per])) for i in range(3))
        row["theory"] = theory("zb_h1", row["pp"], row["m"], row["v"], row["costs"])
        row["sim"] = simulated_bubble("zb_h1", row["pp"], row["m"], row["v"], row["costs"])
    row.update(run=group.label, repeats=group.repeats, n_timed=sum(p["n_timed"] for p in per),
               run_dir=group.run_dirs)
    return row


def plot(rows, runs, caveats, out_dir):
    plt = tr.pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(rows) + 3), 4.5))
    x = np.arange(len(rows))
    mean = np.array([r["mean"] for r in rows])
    spread = [mean - [r["mean_min"] for r in rows], [r["mean_max"] for r in rows] - mean]
    repeated = any(r["repeats"] > 1 for r in rows)
    ax.bar(x - 0.2, mean, 0.4, yerr=spread if repeated else None, capsize=4,
           label="measured (mean over ranks)" + (", min-max over repeats" if repeated else ""))
    ax.plot(x - 0.2, [r["max"] for r in rows], "v", color="black", label="measured (max rank)")
    ax.bar(x + 0.2, [r["sim"] for r in rows], 0.4, color="lightgrey", label="schedule model")
    ax.plot(x + 0.2, [r["theory"] for r in rows], "_", color="red", markersize=22, mew=2,
            label="theory")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{r['run']}\npp={r['pp']} m={r['m']} {r['kind']}"
                        + (f" v={r['v']}" if r["kind"] == "interleaved" else "") for r in rows],
                       rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("bubble (share of the step)")
    ax.set_title("pipeline bubble: measured vs theory and schedule model")
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    notes = [tr.repeats_note([r["repeats"] for r in rows], "bubble", "bar")]
    return tr.save_figure(fig, out_dir, "bubble.png", runs, caveats, notes, oversubscription=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_common_args(ap)
    ap.add_argument("--cores", type=int, default=os.cpu_count(),
                    help="cores per node the ranks shared (default: this machine's)")
    ap.add_argument("--include-pp1", action="store_true",
                    help="keep runs with pp = 1 (bubble theory 0) in the table")
    args = ap.parse_args()
    runs = tr.load_runs(args.paths, strict=args.strict, warmup=args.warmup,
                        allow_mixed_provenance=args.allow_mixed_provenance)
    no_pipeline = [r.name for r in runs if r.cfg("parallel.pp") == 1]
    if not args.include_pp1:
        runs = [r for r in runs if r.cfg("parallel.pp") != 1]
        if not runs:
            raise tr.AnalysisError(f"no run has pp > 1 (left out: {', '.join(no_pipeline)}); "
                                   f"--include-pp1 tabulates them anyway")
    rows = [aggregate(g) for g in tr.group_runs(runs)]
    order = {"gpipe": 0, "1f1b": 1, "interleaved": 2, "zb_h1": 3}
    rows.sort(key=lambda r: (r["pp"], order.get(r["kind"], 9), r["m"], r["run"]))

    print(f"{'pp':>3} {'m':>3} {'schedule':<12} {'v':>2} {'L':>3} {'steps':>5} {'step s':>7} "
          f"{'bubble(mean)':>12} {'bubble(max)':>11} {'theory':>7} {'simulated':>9} "
          f"{'busy/core':>9}  run")
    for r in rows:
        # Rank-seconds not spent waiting on the pipeline, per core-second the machine had: above 1,
        # the ranks report more compute than the cores could run, i.e. time-sharing stretched it.
        r["busy_per_core"] = (1.0 - r["mean"]) * r["ranks_per_node"] / args.cores
        print(f"{r['pp']:>3} {r['m']:>3} {r['kind']:<12} {r['v']:>2} {r['L']:>3} "
              f"{r['n_timed']:>5} {r['step_s']:>7.3f} {r['mean']:>12.3f} {r['max']:>11.3f} "
              f"{r['theory']:>7.3f} {r['sim']:>9.3f} {r['busy_per_core']:>9.2f}  {r['run']}")
    print(f"""
bubble(mean): median over timed steps of the `bubble` dataset: mean over ranks of pp_wait / the
  slowest rank's step time. bubble(max): the same for the rank that waited most.
theory: (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) for interleaved, and for zb_h1
  (p-1)(F+B-W)/(m(F+B+W)+(p-1)(F+B-W)) with the run's forward, input-gradient and weight-gradient
  seconds per micro-batch (Qi et al. 2024; exact in the model when W <= min(F, B)). simulated: the
  schedule model (src/parallel/pipeline/schedule.cpp, ported): free transfers, forward 1 unit and
  backward 2, or zb_h1's measured F, B, W.
steps: timed steps (after the first {args.warmup}, without a checkpoint write). busy/core:
  (1 - bubble(mean)) x ranks per node / cores, the rank-time not waiting per core-time available.""")
    oversubscribed = [r["run"] for r in rows if r["ranks_per_node"] > args.cores]
    caveats = []
    if oversubscribed:
        caveats.append(f"{', '.join(oversubscribed)} put more ranks on a node than its "
                       f"{args.cores} core(s): the ranks time-shared the cores, so the measured "
                       f"bubble estimates neither the schedule's bubble nor a bound on it "
                       f"(see the printed note)")
        print(f"""
note: {', '.join(oversubscribed)} put more ranks on a node than its {args.cores} core(s):
  the cores here were shared by the pp ranks (oversubscribed) and by whatever
  else ran on the machine. Theory and model assume each stage owns a processor, so stages compute at
  the same time and a stage idles only while the pipeline fills and drains. Here the phase timers
  measure wall time: a rank descheduled in the middle of a kernel books that time as forward or
  backward, and a rank blocked in a receive books as pp_wait time its neighbour spent competing for
  the same cores. With more ranks than cores at most `cores` ranks compute at once;
  busy/core above 1 shows the compute phases were stretched by time-sharing, and the measured
  bubble then estimates neither the schedule's bubble nor a bound on it (it can come out below
  theory). Rows with pp <= cores are closest to the model's setting, but other load stretches
  micro-batches unevenly, which shows up as extra wait in the neighbour. Beyond the schedule,
  pp_wait also holds the final send drain and the tied-embedding gradient all-reduce between the
  first and last stage; the step time holds the optimizer; and the stages are not equal (the
  first holds the embedding, the last the LM head and loss), all of which the theory leaves out.
  Run on one core per rank with nothing else running to compare with theory.""")
    if no_pipeline and not args.include_pp1:
        print(f"\nleft out (pp = 1, no pipeline: theory and model 0): {', '.join(no_pipeline)}")

    df = pd.DataFrame([{
        "run": r["run"], "ranks": r["ranks"], "dp": r["dp"], "tp": r["tp"], "pp": r["pp"],
        "schedule": r["kind"], "virtual_stages": r["v"], "micro_batches": r["m"],
        "micro_batch_size": r["micro"], "layers": r["L"], "repeats": r["repeats"],
        "timed_steps": r["n_timed"], "median_step_s": r["step_s"], "bubble_mean": r["mean"],
        "bubble_mean_min": r["mean_min"], "bubble_mean_max": r["mean_max"], "bubble_max": r["max"],
        "theory": r["theory"], "simulated": r["sim"], "busy_per_core": r["busy_per_core"],
        "forward_s": r["costs"][0] if r["kind"] == "zb_h1" else float("nan"),
        "input_grad_s": r["costs"][1] if r["kind"] == "zb_h1" else float("nan"),
        "weight_grad_s": r["costs"][2] if r["kind"] == "zb_h1" else float("nan"),
        "run_dir": r["run_dir"]} for r in rows])
    out = tr.output_dir(args.out, runs)
    tr.write_table(df, out, "bubble", md_df=df.drop(columns=["run_dir"]),
                   formats={"median_step_s": ".5f", "bubble_mean": ".3f", "bubble_max": ".3f",
                            "bubble_mean_min": ".3f", "bubble_mean_max": ".3f",
                            "theory": ".3f", "simulated": ".3f", "busy_per_core": ".2f",
                            "forward_s": ".5f", "input_grad_s": ".5f", "weight_grad_s": ".5f"})
    png = plot(rows, runs, caveats, out)
    print(f"\nwrote {out}/bubble.csv, bubble.md, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
