# analysis/bubble.py on the fixture's layout sweep: theory, schedule model and measured bubbles.
import glob
import os

import numpy as np

from analysis_test import Env, check, check_markdown, check_png, close, read_csv, timed_mask, \
    timings

env = Env()
sweep = env.sweep("layout_sweep", 1003)
out = env.out("layouts")
stdout, _ = env.script("bubble", sweep, "--out", out, "--cores", "2")
for text in ("bubble(mean) bubble(max)  theory simulated busy/core", "theory: (p-1)/(m+p-1)",
             "note: dp2_tp1_pp2_1f1b_m2 put more ranks on a node than its 2 core(s)",
             "left out (pp = 1, no pipeline: theory and model 0): dp1_tp2_pp1, "
             "dp2_tp1_pp1"):
    check(text in stdout, f"{text!r} not printed:\n{stdout}")
# With a core per rank the oversubscription note is not printed.
stdout, _ = env.script("bubble", sweep, "--out", env.out("layouts_8"), "--cores", "8")
check("note:" not in stdout, f"note printed with 8 cores for at most 4 ranks:\n{stdout}")
rows = read_csv(os.path.join(out, "bubble.csv"))
by_run = {r["run"]: r for r in rows}
pipelined = ["dp1_tp1_pp2_1f1b_m2", "dp1_tp1_pp2_1f1b_m4", "dp1_tp1_pp2_gpipe_m2",
             "dp1_tp1_pp2_interleaved_m2", "dp1_tp1_pp2_zb_h1_m2", "dp2_tp1_pp2_1f1b_m2"]
check(sorted(by_run) == pipelined, f"rows {sorted(by_run)}: expected the pp = 2 runs")
# (p-1)/(m+p-1), and (p-1)/(v m+p-1) interleaved; the schedule model agrees on these.
expected = {"dp1_tp1_pp2_gpipe_m2": ("gpipe", 2, 1, 1 / 3),
            "dp1_tp1_pp2_1f1b_m2": ("1f1b", 2, 1, 1 / 3),
            "dp1_tp1_pp2_1f1b_m4": ("1f1b", 4, 1, 1 / 5),
            "dp1_tp1_pp2_interleaved_m2": ("interleaved", 2, 2, 1 / 5),
            "dp2_tp1_pp2_1f1b_m2": ("1f1b", 2, 1, 1 / 3)}
for run, (schedule, m, v, theory) in expected.items():
    r = by_run[run]
    check((r["schedule"], int(r["micro_batches"]), int(r["virtual_stages"]), int(r["pp"])) ==
          (schedule, m, v, 2), f"{run}: schedule {r['schedule']} m {r['micro_batches']} "
          f"v {r['virtual_stages']} pp {r['pp']}")
    close(float(r["theory"]), theory, f"{run} theory", rtol=1e-12)
    close(float(r["simulated"]), theory, f"{run} simulated", rtol=1e-12)
    data = timings(r["run_dir"])
    timed = timed_mask(data)
    close(float(r["bubble_mean"]), float(np.median(data["bubble"][timed])), f"{run} bubble mean")
    wait = data["phase_seconds"][:, :, data["phases"].index("pp_wait")][timed]
    step = data["step_seconds_max"][timed]
    close(float(r["bubble_max"]), float(np.median(wait.max(axis=1) / step)), f"{run} bubble max")
    check(0 < float(r["bubble_mean"]) < 1, f"{run}: bubble {r['bubble_mean']} outside (0, 1)")
# zb_h1: the paper's (p-1)(F+B-W) bubble with the run's own per-micro-batch pass times, which
# the schedule model reproduces when W <= min(F, B); the others report no pass times.
r = by_run["dp1_tp1_pp2_zb_h1_m2"]
data = timings(r["run_dir"])
timed = timed_mask(data)
ph = data["phase_seconds"][timed]
f, b, w = (float(np.median(ph[:, :, data["phases"].index(p)].mean(axis=1))) / 2
           for p in ("forward", "backward", "weight_grad"))
check(w > 0, "zb_h1 run without weight_grad time")
for name, value in (("forward_s", f), ("input_grad_s", b), ("weight_grad_s", w)):
    close(float(r[name]), value, f"zb_h1 {name}", rtol=1e-9)
close(float(r["theory"]), (f + b - w) / (2 * (f + b + w) + f + b - w), "zb_h1 theory", rtol=1e-9)
if w <= min(f, b):
    close(float(r["simulated"]), float(r["theory"]), "zb_h1 simulated", rtol=1e-9)
check(float(r["simulated"]) < 1 / 3, f"zb_h1 simulated {r['simulated']} not below 1F1B's 1/3")
for run in pipelined:
    if run != "dp1_tp1_pp2_zb_h1_m2":
        check(by_run[run]["weight_grad_s"] == "", f"{run}: pass times reported")
        wg = timings(by_run[run]["run_dir"])["phase_seconds"][:, :, data["phases"].index(
            "weight_grad")]
        check((wg == 0).all(), f"{run}: weight_grad time without a split schedule")
cells = check_markdown(os.path.join(out, "bubble.md"), len(pipelined))
check(sorted(c[0] for c in cells) == pipelined, "Markdown rows are not the runs")
check_png(os.path.join(out, "bubble.png"))

# As bench/pipeline_bubble.sh calls it: timings.h5 files, one warm-up step, the cores given.
files = sorted(glob.glob(os.path.join(sweep, "*", "timings.h5")))
out = env.out("files")
env.script("bubble", "--cores", "2", "--warmup", "1", "--out", out, "--include-pp1", *files)
rows = read_csv(os.path.join(out, "bubble.csv"))
check(len(rows) == 8, f"--include-pp1: {len(rows)} rows, expected 8")
for r in rows:
    check(int(r["timed_steps"]) == 8, f"{r['run']}: --warmup 1 leaves {r['timed_steps']} steps, "
          f"expected 8 (12 steps, 1 warm-up, checkpoints at 5, 10, 12)")
    close(float(r["busy_per_core"]), (1 - float(r["bubble_mean"])) * int(r["ranks"]) / 2,
          f"{r['run']} busy/core")
    if r["pp"] == "1":
        check(float(r["theory"]) == 0 and float(r["simulated"]) == 0, f"{r['run']}: pp 1 bubble")

# A sweep without a pipelined run is an error, unless --include-pp1.
_, err = env.script("bubble", env.sweep("weak_scaling", 1001), "--out", env.out("x"), expect=2)
check("bubble.py: error: no run has pp > 1" in err, f"no pp > 1: {err}")
print("bubble: ok")
