# Goodput of a trident run: productive step time over wall time, and where the rest went.
"""Goodput of trident runs: productive training time over wall time, and the badput by cause.

RUN_DIR: run directories (one run each, all its timings segments: timings.h5, timings.2.h5, ...;
a run that was resumed or relaunched by jobs/train.sh has one segment per start). Wall time runs
from the first process's start (the timings attribute process_start_unix) to the last step's end
(step_end_unix). Per run, in seconds and as a share of the wall time:
  productive   the steps that count (each step number's last execution): their step time (the
               checkpoint written after a step is not in it) less their straggler wait
  checkpoint   what checkpoints cost the training (checkpoint_seconds, the slowest rank's: the
               writes, or with run.async_checkpoints the copy to host memory, the file's
               creation and the commit, the write itself running behind the steps; older files:
               the io phase, then taken out of the step time), after every execution of a step
  lost         steps executed again after a resume: every earlier execution of a step number a
               later segment ran again (their step time)
  startup      each segment's start: from its process's start to its first step's start
  restart      between segments: from the last step a segment recorded to the next process's
               start (the failure, its detection and the relaunch)
  straggler    per counted step, the slowest rank's compute seconds less the median rank's (what
               the others wait for); data loading has no phase of its own (it is in forward)
  other        the rest: evaluation, logging and the time between steps
goodput, the effective-training-time ratio, is productive / wall; checkpoints: the writes, and
seconds_per_checkpoint their mean (what `trident plan --checkpoint-seconds` takes). Writes goodput.csv and
goodput.md into --out (default: the first run's directory) and prints the Markdown table.
"""
import argparse
import os
import sys

import trident_runs as tr

import h5py  # noqa: E402 (trident_runs checks the interpreter first)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

COMPUTE = ("forward", "backward", "recompute", "weight_grad", "optimizer")


def read_segments(run_dir):
    paths = tr.timings_segments(run_dir)
    if not paths:
        raise tr.AnalysisError(f"{run_dir}: no timings.h5")
    segments = []
    for path in paths:
        with h5py.File(path, "r") as f:
            if "step_end_unix" not in f or "process_start_unix" not in f.attrs:
                raise tr.AnalysisError(f"{path}: no step_end_unix (trident before goodput)")
            phases = tr.attr_value(f.attrs["phases"]).split(",")
            seconds = f["phase_seconds"][()]  # [steps, ranks, phases]
            compute = sum(seconds[:, :, phases.index(p)] for p in COMPUTE if p in phases)
            segments.append({
                "path": path, "start": float(tr.attr_value(f.attrs["process_start_unix"])),
                "step": f["step"][()].astype(int), "seconds": f["step_seconds_max"][()],
                "end": f["step_end_unix"][()], "io": seconds[:, :, phases.index("io")].max(axis=1),
                # trident since checkpoint_seconds: the step time leaves the write out
                "written": f["checkpoint_seconds"][()] if "checkpoint_seconds" in f else None,
                # since asynchronous checkpoints: which steps wrote (or started) one
                "saved": f["checkpoint_saved"][()] if "checkpoint_saved" in f else None,
                "straggler": np.clip(compute.max(axis=1) - np.median(compute, axis=1), 0, None)})
    return segments


def goodput(run_dir):
    segments = read_segments(run_dir)
    last = {}  # step -> (segment, row) of its last execution
    for k, s in enumerate(segments):
        for row, step in enumerate(s["step"]):
            last[int(step)] = (k, row)
    counted = set(last.values())
    t = dict(productive=0.0, checkpoint=0.0, lost=0.0, startup=0.0, restart=0.0, straggler=0.0)
    lost_steps, writes = [], 0
    for k, s in enumerate(segments):
        apart = s["written"] is not None
        ckpt = s["written"] if apart else s["io"]
        work_of = s["seconds"] if apart else s["seconds"] - s["io"]
        if len(s["step"]):
            first = s["seconds"][0] + (ckpt[0] if apart else 0)
            t["startup"] += s["end"][0] - first - s["start"]
        if k > 0 and len(segments[k - 1]["step"]):
            t["restart"] += s["start"] - segments[k - 1]["end"][-1]
        for row, step in enumerate(s["step"]):
            t["checkpoint"] += ckpt[row]
            writes += int(s["saved"][row] if s["saved"] is not None else ckpt[row] > 0)
            work = work_of[row]
            if (k, row) in counted:
                t["straggler"] += s["straggler"][row]
                t["productive"] += work - s["straggler"][row]
            else:
                t["lost"] += work
                lost_steps.append(int(step))
    ended = [s["end"][-1] for s in segments if len(s["end"])]
    wall = max(ended) - segments[0]["start"]
    t["other"] = wall - sum(t.values())
    row = {"run": os.path.basename(os.path.normpath(run_dir)), "segments": len(segments),
           "steps": len(last), "wall_s": wall, **{f"{k}_s": v for k, v in t.items()},
           "goodput": t["productive"] / wall if wall > 0 else 0.0, "checkpoints": writes,
           "seconds_per_checkpoint": t["checkpoint"] / writes if writes else 0.0,
           "lost_steps": " ".join(map(str, lost_steps))}
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories")
    ap.add_argument("--out", help="output directory (default: the first run's)")
    args = ap.parse_args()
    df = pd.DataFrame([goodput(r) for r in args.runs])
    out = args.out or args.runs[0]
    os.makedirs(out, exist_ok=True)
    seconds = {c: ".2f" for c in df.columns if c.endswith("_s")}
    text = tr.write_table(df, out, "goodput",
                          formats={**seconds, "goodput": ".4f", "seconds_per_checkpoint": ".3f"})
    print(text)
    print(f"wrote {out}/goodput.csv, goodput.md")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
