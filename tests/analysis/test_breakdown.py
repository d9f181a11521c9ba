# analysis/breakdown.py on the fixture's layout sweep, phase medians recomputed from timings.h5.
import os

import numpy as np

from analysis_test import Env, check, check_markdown, check_png, close, read_csv, timed_mask, \
    timings

env = Env()
sweep = env.sweep("layout_sweep", 1003)
out = env.out("layouts")
stdout, _ = env.script("breakdown", sweep, "--out", out)
check("| run |" in stdout, f"table not printed:\n{stdout}")
rows = read_csv(os.path.join(out, "breakdown.csv"))
runs = sorted(d for d in os.listdir(sweep) if os.path.isdir(os.path.join(sweep, d)))
check(sorted(r["run"] for r in rows) == runs, f"rows {[r['run'] for r in rows]}, runs {runs}")
for r in rows:
    data = timings(r["run_dir"])
    timed = timed_mask(data)
    ps = data["phase_seconds"][timed]
    step = data["step_seconds_max"][timed]
    check(int(r["timed_steps"]) == timed.sum() == 6, f"{r['run']}: timed steps {r['timed_steps']}")
    close(float(r["median_step_s"]), float(np.median(step)), f"{r['run']} median step")
    for i, phase in enumerate(data["phases"]):
        close(float(r[f"{phase}_mean_s"]), float(np.median(ps[:, :, i].mean(axis=1))),
              f"{r['run']} {phase} mean over ranks", rtol=1e-12)
        close(float(r[f"{phase}_max_s"]), float(np.median(ps[:, :, i].max(axis=1))),
              f"{r['run']} {phase} max over ranks", rtol=1e-12)
    close(float(r["other_mean_s"]), float(np.median(step - ps.mean(axis=1).sum(axis=1))),
          f"{r['run']} other")
    # Checkpoint steps are not timed, so no io time is left in the breakdown.
    check(float(r["io_max_s"]) == 0.0, f"{r['run']}: io {r['io_max_s']} in timed steps")
    check(float(r["forward_mean_s"]) > 0 and float(r["backward_mean_s"]) > 0,
          f"{r['run']}: no forward/backward time")
    check(float(r["forward_max_s"]) >= float(r["forward_mean_s"]), f"{r['run']}: max < mean")
by_run = {r["run"]: r for r in rows}
check(float(by_run["dp1_tp2_pp1"]["tp_comm_mean_s"]) > 0, "tp 2 run without tp_comm time")
check(float(by_run["dp2_tp1_pp1"]["dp_comm_mean_s"]) > 0, "dp 2 run without dp_comm time")
check(float(by_run["dp1_tp1_pp2_gpipe_m2"]["pp_wait_mean_s"]) > 0, "pp 2 run without pp_wait")
cells = check_markdown(os.path.join(out, "breakdown.md"), len(runs))
check(sorted(c[0] for c in cells) == runs, "Markdown rows are not the runs")
check_png(os.path.join(out, "breakdown.png"))

# The figure: no all-zero (or timer-noise) series, one distinct colour per series. The weak
# sweep has no pipeline, so pp_wait (a few hundred ns of timer) must not be drawn or listed.
tr, breakdown = env.import_analysis("trident_runs"), env.import_analysis("breakdown")
figures = []
tr.save_figure = lambda fig, *a, **k: figures.append((fig, k))
for path in (env.sweep("weak_scaling", 1001), sweep):
    runs = tr.load_runs([path])
    df, phases = breakdown.table(runs)
    breakdown.plot(df, phases, runs, out)
    ax = figures[-1][0].axes[0]
    handles, labels = ax.get_legend_handles_labels()
    bars = {label: h for h, label in zip(handles, labels) if hasattr(h, "patches")}
    for label, h in bars.items():
        heights = [p.get_height() for p in h.patches]
        check(max(heights) > 1e-3 * df["median_step_s"].max() * 1e3,
              f"{path}: legend entry {label!r} is (near) zero in every bar: {heights}")
    colors = [tuple(h.patches[0].get_facecolor()) for h in bars.values()]
    check(len(set(colors)) == len(colors), f"{path}: series share a colour: "
          f"{dict(zip(bars, colors))}")
    if path != sweep:
        check("pp_wait" not in labels and "pp_wait ms" not in
              breakdown.markdown_frame(df, phases).columns.str.cat(sep="|"),
              f"weak sweep: pp_wait drawn or tabulated: {labels}")
        check("other" in labels and "forward" in labels, f"weak sweep legend {labels}")
    else:
        check("pp_wait" in labels, f"layout sweep: pp_wait not drawn: {labels}")
print("breakdown: ok")
