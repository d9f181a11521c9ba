# analysis/scaling.py on the fixture's weak and strong sweeps, numbers recomputed from timings.h5.
import json
import os
import shutil

import numpy as np

from analysis_test import Env, check, check_markdown, check_png, close, png_text, read_csv, \
    timed_mask, timings


def check_table(env, out, kind, warmup=3):
    rows = read_csv(os.path.join(out, "scaling.csv"))
    check(len(rows) == 3, f"{kind}: {len(rows)} rows, expected one per run (3)")
    check([int(r["ranks"]) for r in rows] == [1, 2, 4],
          f"{kind}: ranks {[r['ranks'] for r in rows]}")
    expected = []
    for r in rows:
        data = timings(r["run_dir"])
        with open(os.path.join(r["run_dir"], "run.json")) as f:
            info = json.load(f)
        check(int(r["ranks"]) == data["phase_seconds"].shape[1] == info["ranks"],
              f"{r['run']}: ranks {r['ranks']} vs timings {data['phase_seconds'].shape[1]}")
        check(int(r["nodes"]) == len(set(data["hostnames"])) == 1,
              f"{r['run']}: nodes {r['nodes']}")
        # The suite runs every rank on OMP_NUM_THREADS=2 (TRIDENT_TEST_ENV).
        check(int(r["threads"]) == data["threads_per_rank"] == int(os.environ["OMP_NUM_THREADS"]),
              f"{r['run']}: threads {r['threads']}, timings {data['threads_per_rank']}")
        check(int(r["cores"]) == int(r["ranks"]) * int(r["threads"]), f"{r['run']}: cores")
        timed = timed_mask(data, warmup)
        # 12 steps with checkpoints at 5, 10 and 12.
        want_timed = len([s for s in range(warmup + 1, 13) if s not in (5, 10, 12)])
        check(int(r["timed_steps"]) == timed.sum() == want_timed,
              f"{r['run']}: timed_steps {r['timed_steps']}, expected {want_timed}")
        median = float(np.median(data["step_seconds_max"][timed]))
        tokens = float(data["tokens"][timed][0])
        close(float(r["median_step_s"]), median, f"{r['run']} median step")
        close(float(r["tokens_per_step"]), tokens, f"{r['run']} tokens per step")
        close(float(r["tokens_per_s"]), tokens / median, f"{r['run']} tokens/s")
        close(float(r["tflops_per_rank"]),
              tokens / median * data["flops_per_token"] / data["phase_seconds"].shape[1] / 1e12,
              f"{r['run']} TFLOP/s per rank")
        expected.append((int(r["ranks"]), median, tokens / median))
    n0, t0, thr0 = expected[0]
    for r, (n, t, thr) in zip(rows, expected):
        eff = (thr / n) / (thr0 / n0) if kind == "weak" else (n0 * t0) / (n * t)
        close(float(r["efficiency"]), eff, f"{kind} {r['run']} efficiency")
    check(float(rows[0]["efficiency"]) == 1.0, f"{kind}: efficiency of the 1-rank row "
          f"{rows[0]['efficiency']} != 1")
    check_markdown(os.path.join(out, "scaling.md"), 3)
    check_png(os.path.join(out, "scaling.png"))
    # Runs whose node ran more threads than it had CPUs carry a caveat on the figure, named.
    notes = png_text(os.path.join(out, "scaling.png")).get("Description", "")
    over = [r["run"] for r in rows
            if int(r["ranks"]) * int(r["threads"]) > timings(r["run_dir"])["node_cpus"]]
    for name in over:
        check("caveat: oversubscribed" in notes and name in notes,
              f"{kind}: {name} oversubscribed its node, no caveat on the figure:\n{notes}")
    if not over:
        check("oversubscribed" not in notes, f"{kind}: a caveat without oversubscription:\n{notes}")
    return rows


env = Env()
weak, strong = env.sweep("weak_scaling", 1001), env.sweep("strong_scaling", 1002)

# The kind comes from sweep.json; the Markdown table is printed.
stdout, _ = env.script("scaling", weak, "--out", env.out("weak"))
check("weak scaling" in stdout and "| run |" in stdout, f"weak: table not printed:\n{stdout}")
rows = check_table(env, env.out("weak"), "weak")
check([int(r["global_batch"]) for r in rows] == [4, 8, 16], "weak: global batch grows with dp")

stdout, _ = env.script("scaling", strong, "--out", env.out("strong"))
check("strong scaling" in stdout, f"strong: kind not taken from sweep.json:\n{stdout}")
check_table(env, env.out("strong"), "strong")

# --warmup changes the timed steps.
env.script("scaling", strong, "--out", env.out("strong_w5"), "--warmup", "5")
check_table(env, env.out("strong_w5"), "strong", warmup=5)

# --kind overrides sweep.json; strong scaling refuses runs with different global batches.
_, err = env.script("scaling", weak, "--kind", "strong", "--out", env.out("x"), expect=2)
check("scaling.py: error:" in err and "one global batch" in err, f"strong on weak sweep: {err}")
# Sweeps of different experiments need --kind.
_, err = env.script("scaling", weak, strong, "--out", env.out("x"), expect=2)
check("--kind" in err, f"mixed sweeps without --kind: {err}")
# dp 2 at a batch of 8 is the same run in both sweeps: two repeats of one row (5 rows, not 6),
# the median of two runs' medians their mean, the spread their min and max.
env.script("scaling", weak, strong, "--kind", "weak", "--out", env.out("both"))
rows = read_csv(os.path.join(env.out("both"), "scaling.csv"))
check(len(rows) == 5, f"two sweeps: {len(rows)} rows, expected 5 (dp 2 in both is one layout)")
(dp2,) = [r for r in rows if r["ranks"] == "2"]
check(dp2["run"] == "dp2_tp1_pp1" and int(dp2["repeats"]) == 2, f"dp 2 row: {dp2}")
medians = [float(np.median(timings(d)["step_seconds_max"][timed_mask(timings(d))]))
           for d in dp2["run_dir"].split(";")]
check(len(medians) == 2, f"dp 2 run_dir {dp2['run_dir']}")
close(float(dp2["median_step_s"]), sum(medians) / 2, "dp 2: median of two repeats")
close(float(dp2["step_s_min"]), min(medians), "dp 2: step_s_min")
close(float(dp2["step_s_max"]), max(medians), "dp 2: step_s_max")
check(sorted(r["run"] for r in rows if r["ranks"] != "2") ==
      ["1001/dp1_tp1_pp1", "1001/dp4_tp1_pp1", "1002/dp1_tp1_pp1", "1002/dp4_tp1_pp1"],
      f"layouts of the same name with different batches: {[r['run'] for r in rows]}")

# Without --out the files go into the (first) sweep directory.
copy = env.out("weak_copy")
shutil.copytree(weak, copy)
env.script("scaling", copy)
check_table(env, copy, "weak")
print("scaling: ok")
