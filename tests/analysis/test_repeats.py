# Repeats of a layout (jobs' REPEATS: <layout>_rep<k>) aggregated into one row: median, min-max.
"""Synthetic repeats from the fixture's weak sweep: 4 copies of each layout whose step times (and
phase times, bubbles) are set by hand, so the rows' median, min, max and count are known."""
import os
import shutil

import h5py
import numpy as np

from analysis_test import Env, check, check_markdown, check_png, close, edit_json, png_text, \
    read_csv, timed_mask, timings

FACTORS = (1.0, 1.5, 2.0, 4.0)  # repeat k's times are FACTORS[k-1] x the layout's
BASE = {"dp1_tp1_pp1": 0.010, "dp2_tp1_pp1": 0.012, "dp4_tp1_pp1": 0.020}
PATTERN = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 100.0])  # over the 6 timed steps: median 1.5


def make_repeats(src, dst, layouts, with_layout=True):
    """dst: src's sweep.json and <layout>_rep<k> copies of its runs, times scaled by FACTORS."""
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "sweep.json"), dst)
    for name in layouts:
        for k, factor in enumerate(FACTORS, 1):
            run = os.path.join(dst, f"{name}_rep{k}")
            shutil.copytree(os.path.join(src, name), run)
            if with_layout:
                edit_json(os.path.join(run, "run.json"), layout=name, repeat=k,
                          repeats=len(FACTORS))
            else:  # older run.json: the name is the directory's less _rep<k>
                edit_json(os.path.join(run, "run.json"), drop=("layout",))
            timed = timed_mask(timings(run))
            with h5py.File(os.path.join(run, "timings.h5"), "r+") as f:
                step = np.full(f["step_seconds_max"].shape, 10.0)
                step[timed] = PATTERN * BASE.get(name, 0.01) * factor
                f["step_seconds_max"][...] = step
                f["phase_seconds"][...] = f["phase_seconds"][()] * factor
                bubble = f["bubble"][()]
                bubble[timed] = 0.1 * factor
                f["bubble"][...] = bubble


env = Env()
weak = env.sweep("weak_scaling", 1001)
sweep = env.out("weak_repeats")
make_repeats(weak, sweep, ["dp1_tp1_pp1", "dp2_tp1_pp1"])
make_repeats(weak, env.out("old"), ["dp4_tp1_pp1"], with_layout=False)
for name in os.listdir(env.out("old")):
    if name != "sweep.json":
        shutil.move(os.path.join(env.out("old"), name), sweep)

# scaling.py: one row per layout, numbers by hand.
out = env.out("scaling")
stdout, _ = env.script("scaling", sweep, "--out", out)
rows = read_csv(os.path.join(out, "scaling.csv"))
check([r["run"] for r in rows] == list(BASE), f"rows {[r['run'] for r in rows]}: repeats not "
      f"aggregated into one row per layout {list(BASE)}")
medians = 1.5 * np.array(FACTORS)  # each repeat's median over its timed steps, x BASE
for r in rows:
    base = BASE[r["run"]]
    check(int(r["repeats"]) == 4, f"{r['run']}: repeats {r['repeats']}, expected 4")
    check(int(r["timed_steps"]) == 24, f"{r['run']}: timed steps {r['timed_steps']}, expected 24")
    close(float(r["median_step_s"]), base * (1.5 * 1.5 + 1.5 * 2.0) / 2,
          f"{r['run']} median of the medians 1.5, 2.25, 3, 6 (x base)")
    close(float(r["step_s_min"]), base * 1.5, f"{r['run']} step_s_min")
    close(float(r["step_s_max"]), base * 6.0, f"{r['run']} step_s_max")
    tokens = float(r["tokens_per_step"])
    close(float(r["tokens_per_s"]), tokens / (base * 2.625), f"{r['run']} tokens/s")
    close(float(r["tokens_per_s_min"]), tokens / (base * 6.0), f"{r['run']} tokens/s min")
    check(len(r["run_dir"].split(";")) == 4, f"{r['run']}: run_dir {r['run_dir']}")
# Efficiency from the aggregated medians; its spread from this row's min-max.
per_rank = {r["run"]: float(r["tokens_per_step"]) / (BASE[r["run"]] * 2.625) / int(r["ranks"])
            for r in rows}
for r in rows:
    want = per_rank[r["run"]] / per_rank["dp1_tp1_pp1"]
    close(float(r["efficiency"]), want, f"{r['run']} efficiency")
    close(float(r["efficiency_min"]), want * 2.625 / 6.0, f"{r['run']} efficiency_min")
    close(float(r["efficiency_max"]), want * 2.625 / 1.5, f"{r['run']} efficiency_max")
cells = check_markdown(os.path.join(out, "scaling.md"), 3)
header = open(os.path.join(out, "scaling.md")).readline()
for column in ("repeats", "median_step_s", "step_s_min", "step_s_max"):
    check(f"| {column} |" in header, f"scaling.md lacks the {column} column: {header}")
check_png(os.path.join(out, "scaling.png"))
notes = png_text(os.path.join(out, "scaling.png")).get("Description", "")
check("median over 4 repeats" in notes and "error bars: min-max" in notes,
      f"scaling.png does not say what its points and error bars are: {notes!r}")

# The figure draws min-max error bars at each point (one series, no zigzag between repeats).
tr, scaling = env.import_analysis("trident_runs"), env.import_analysis("scaling")
figures = []
tr.save_figure = lambda fig, *a, **k: figures.append(fig)
runs = tr.load_runs([sweep])
df, _ = scaling.table(runs, "weak")
scaling.plot(df, "weak", runs, out)
ax_thr, ax_eff = figures[0].axes
for ax, column, scale in ((ax_thr, "tflops", 1e3), (ax_eff, "efficiency", 1.0)):
    bars = [c for c in ax.containers if c.has_yerr]
    check(len(bars) == 1, f"{column}: {len(bars)} error-bar series, expected 1")
    x, y = bars[0].lines[0].get_data()
    check(list(x) == [1, 2, 4], f"{column}: points at ranks {list(x)}, expected one per layout")
    segments = bars[0].lines[2][0].get_segments()
    lows = sorted(s[0][1] for s in segments)
    highs = sorted(s[1][1] for s in segments)
    check(np.allclose(lows, sorted(df[column + "_min"] * scale)) and
          np.allclose(highs, sorted(df[column + "_max"] * scale)),
          f"{column}: error bars {lows}..{highs} are not the rows' min-max")
labels = ax_thr.get_legend_handles_labels()[1]
check("ideal" in labels, f"throughput legend {labels}: no line labelled just 'ideal'")
ticks = [t.get_text() for t in ax_thr.get_yticklabels() + ax_thr.get_yticklabels(minor=True)]
check(all("10^" not in t and "times" not in t for t in ticks), f"log tick labels: {ticks}")

# breakdown.py: phases are the median over the repeats (x 1.75 here), step spread min-max.
out = env.out("breakdown")
env.script("breakdown", sweep, "--out", out)
rows = read_csv(os.path.join(out, "breakdown.csv"))
check([r["run"] for r in rows] == list(BASE), f"breakdown rows {[r['run'] for r in rows]}")
for r in rows:
    check(int(r["repeats"]) == 4, f"breakdown {r['run']}: repeats {r['repeats']}")
    close(float(r["median_step_s"]), BASE[r["run"]] * 2.625, f"breakdown {r['run']} step")
    close(float(r["step_s_min"]), BASE[r["run"]] * 1.5, f"breakdown {r['run']} step min")
    close(float(r["step_s_max"]), BASE[r["run"]] * 6.0, f"breakdown {r['run']} step max")
    data = timings(os.path.join(weak, r["run"]))
    timed = timed_mask(data)
    forward = data["phase_seconds"][timed][:, :, data["phases"].index("forward")]
    close(float(r["forward_mean_s"]), float(np.median(forward.mean(axis=1))) * 1.75,
          f"breakdown {r['run']} forward: median over repeats of 1, 1.5, 2, 4 x the run's")
check_markdown(os.path.join(out, "breakdown.md"), 3)
check_png(os.path.join(out, "breakdown.png"))

# bubble.py (--include-pp1, the weak runs have no pipeline): bubble(mean) 0.1 x the factors.
out = env.out("bubble")
env.script("bubble", sweep, "--include-pp1", "--cores", "8", "--out", out)
for r in read_csv(os.path.join(out, "bubble.csv")):
    check(int(r["repeats"]) == 4, f"bubble {r['run']}: repeats {r['repeats']}")
    close(float(r["bubble_mean"]), 0.175, f"bubble {r['run']} median")
    close(float(r["bubble_mean_min"]), 0.1, f"bubble {r['run']} min")
    close(float(r["bubble_mean_max"]), 0.4, f"bubble {r['run']} max")
print("repeats: ok")
