# analysis/convergence.py on the fixture's dp-mode and precision runs: labels, final losses.
import math
import os

import numpy as np

from analysis_test import Env, check, check_markdown, check_png, read_csv, timings

env = Env()
sweep = env.sweep("convergence", 1005)
out = env.out("modes")
stdout, _ = env.script("convergence", sweep, "--out", out)
check("| run |" in stdout, f"table not printed:\n{stdout}")
rows = read_csv(os.path.join(out, "convergence.csv"))
labels = {r["run"]: r["label"] for r in rows}
# Labelled by what differs: dp.sync and precision.compute; local_steps only where it matters.
want = {"dp2_sync": "precision.compute=fp32 dp.sync=sync",
        "dp2_async": "precision.compute=fp32 dp.sync=async",
        "dp2_local_sgd": "precision.compute=fp32 dp.sync=local_sgd dp.local_steps=2",
        "dp2_sync_bf16": "precision.compute=bf16 dp.sync=sync"}
check(labels == want, f"labels {labels}, expected {want}")
for r in rows:
    data = timings(r["run_dir"])
    check(int(r["steps"]) == len(data["step"]) == 24, f"{r['run']}: steps {r['steps']}")
    check(float(r["final_loss"]) == data["loss"][-1], f"{r['run']}: final loss {r['final_loss']}")
    val = data["val_loss"][np.isfinite(data["val_loss"])]
    check(len(val) == 4 and float(r["final_val_loss"]) == val[-1],
          f"{r['run']}: final val loss {r['final_val_loss']}, evaluated {val}")
    for key in ("final_loss", "final_val_loss", "min_loss"):
        check(math.isfinite(float(r[key])), f"{r['run']}: {key} {r[key]} not finite")
    # Every mode trains: the loss falls from ln 256 = 5.55.
    check(float(r["final_loss"]) < data["loss"][0] - 0.3, f"{r['run']}: loss did not fall")
curves = read_csv(os.path.join(out, "convergence_curves.csv"))
check(len(curves) == 4 * 24, f"curves: {len(curves)} rows, expected 96")
check(sum(1 for c in curves if c["val_loss"] not in ("", "nan")) == 16, "curves: val points")
cells = check_markdown(os.path.join(out, "convergence.md"), 4)
check(sorted(c[0] for c in cells) == sorted(want), "Markdown rows are not the runs")
check_png(os.path.join(out, "convergence.png"))

# Run directories and sweeps mixed: labels then show the keys that differ among all of them.
out = env.out("mixed")
env.script("convergence", os.path.join(sweep, "dp2_sync"), os.path.join(sweep, "dp2_async"),
           env.sweep("strong_scaling", 1002), "--out", out)
rows = read_csv(os.path.join(out, "convergence.csv"))
check(len(rows) == 5, f"mixed: {len(rows)} rows, expected 5")
check(len({r["label"] for r in rows}) == 5,
      f"mixed: labels not distinct: {[r['label'] for r in rows]}")
check(all("run.steps=" in r["label"] for r in rows), "mixed: run.steps differs but is not shown")
check_markdown(os.path.join(out, "convergence.md"), 5)
print("convergence: ok")
