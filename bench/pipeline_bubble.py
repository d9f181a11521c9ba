# Tabulates measured pipeline bubbles (trident timings.h5) next to theory and the schedule model.
"""usage: pipeline_bubble.py [--cores N] RUN_DIR/timings.h5 ...

Per run (one file each) it reads the resolved config (the file's `config` attribute) for pp, the
schedule, virtual_stages, the batch and micro-batch sizes, and reports over the timed steps:
  bubble(mean)  median of the `bubble` dataset: mean over ranks of pp_wait / step time, where
                step time is the slowest rank's (step_seconds_max);
  bubble(max)   median of max over ranks of pp_wait / step_seconds_max;
  theory        (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) for interleaved;
  simulated     1 - 3 m v / makespan from a port of src/parallel/pipeline/schedule.cpp's
                simulator (forward 1 unit, backward 2, zero-latency transfers).
Timed steps: every step after the first (cache warm-up) that wrote no checkpoint (io phase 0 on
every rank: a checkpoint inflates the step time and so deflates the bubble); all steps after the
first if that leaves none.
"""
import argparse
import os
import sys
import tomllib

import h5py
import numpy as np


# ---- port of src/parallel/pipeline/schedule.cpp (action lists and the simulator) ----

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


def make_schedule(kind, pp, rank, m, v):
    if kind == "gpipe":
        return gpipe(m)
    if kind == "1f1b":
        return one_f_one_b(pp, rank, m)
    return interleaved(pp, rank, m, v)


def simulated_bubble(kind, pp, m, v):
    """1 - 3 m v / makespan; blocking receives, non-blocking zero-latency sends."""
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
                elif kind_ == "B" and stage < stages - 1:
                    if (stage + 1, mb) not in bwd_end:
                        break
                    ready = max(ready, bwd_end[(stage + 1, mb)])
                clock[r] = ready + (1 if kind_ == "F" else 2)
                (fwd_end if kind_ == "F" else bwd_end)[(stage, mb)] = clock[r]
                nxt[r] += 1
                progress = True
    if any(nxt[r] < len(lists[r]) for r in range(pp)):
        raise RuntimeError(f"schedule {kind} pp={pp} m={m} v={v} deadlocks in the port")
    return 1.0 - 3.0 * m * v / max(clock)


def theory(kind, pp, m, v):
    return (pp - 1) / ((v if kind == "interleaved" else 1) * m + pp - 1)


# The port must agree with the C++ model's unit tests (tests/unit/test_schedule.cpp).
assert abs(simulated_bubble("1f1b", 4, 8, 1) - 3 / 11) < 1e-12
assert abs(simulated_bubble("interleaved", 4, 8, 2) - 3 / 19) < 1e-12
assert simulated_bubble("1f1b", 1, 8, 1) == 0.0


# ---- measurements ----

def read_run(path):
    with h5py.File(path, "r") as f:
        cfg = tomllib.loads(f.attrs["config"])
        phases = f.attrs["phases"].split(",")
        bubble = f["bubble"][:]
        step_max = f["step_seconds_max"][:]
        ps = f["phase_seconds"][:]  # [steps, ranks, phases]
    par, train = cfg["parallel"], cfg["train"]
    pp, dp = par["pp"], par["dp"]
    kind = par["schedule"]
    v = par["virtual_stages"] if kind == "interleaved" else 1
    m = train["batch_size"] // dp // train["micro_batch_size"]
    wait = ps[:, :, phases.index("pp_wait")]
    io = ps[:, :, phases.index("io")].max(axis=1)
    steps = np.arange(len(bubble))
    timed = (steps > 0) & (io == 0)
    if not timed.any():
        timed = steps > 0 if len(bubble) > 1 else steps == 0
    return {
        "pp": pp, "m": m, "kind": kind, "v": v, "L": cfg["model"]["n_layer"],
        "micro": train["micro_batch_size"], "ranks": ps.shape[1], "n_timed": int(timed.sum()),
        "step_s": float(np.median(step_max[timed])),
        "mean": float(np.median(bubble[timed])),
        "max": float(np.median(wait[timed].max(axis=1) / step_max[timed])),
        "theory": theory(kind, pp, m, v), "sim": simulated_bubble(kind, pp, m, v),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="cores the ranks shared")
    ap.add_argument("timings", nargs="+", help="timings.h5 files, one per run")
    args = ap.parse_args()
    rows = [read_run(p) for p in args.timings]
    order = {"gpipe": 0, "1f1b": 1, "interleaved": 2}
    rows.sort(key=lambda r: (r["pp"], order.get(r["kind"], 9), r["m"]))

    print(f"{'pp':>3} {'m':>3} {'schedule':<12} {'v':>2} {'L':>3} {'steps':>5} {'step s':>7} "
          f"{'bubble(mean)':>12} {'bubble(max)':>11} {'theory':>7} {'simulated':>9} "
          f"{'busy/core':>9}")
    for r in rows:
        # Rank-seconds not spent waiting on the pipeline, per core-second the machine had: above 1,
        # the ranks report more compute than the cores could run, i.e. time-sharing stretched it.
        busy = (1.0 - r["mean"]) * r["ranks"] / args.cores
        print(f"{r['pp']:>3} {r['m']:>3} {r['kind']:<12} {r['v']:>2} {r['L']:>3} "
              f"{r['n_timed']:>5} {r['step_s']:>7.3f} {r['mean']:>12.3f} {r['max']:>11.3f} "
              f"{r['theory']:>7.3f} {r['sim']:>9.3f} {busy:>9.2f}")
    print(f"""
bubble(mean): median over timed steps of the `bubble` dataset: mean over ranks of pp_wait / the
  slowest rank's step time. bubble(max): the same for the rank that waited most.
theory: (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) for interleaved. simulated: the schedule
  model (src/parallel/pipeline/schedule.cpp, ported): forward 1 unit, backward 2, free transfers.
steps: timed steps (after the first, without a checkpoint write). busy/core: (1 - bubble(mean)) x
  ranks / cores, the rank-time not waiting per core-time available.

note: the {args.cores} core(s) here were shared by the pp ranks (oversubscribed) and by whatever
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
