# analysis/stragglers.py and scaling.py's drift column on the fixture's straggler runs.
import os

import numpy as np

from analysis_test import Env, check, check_markdown, check_png, close, read_csv, timings

env = Env()
sweep = env.sweep("stragglers", 1008)
out = env.out("stragglers")
stdout, _ = env.script("stragglers", sweep, "--out", out)
check("| run |" in stdout, f"table not printed:\n{stdout}")
rows = read_csv(os.path.join(out, "stragglers.csv"))
for name, slow in (("dp4_steady", set()), ("dp4_rank2_slow", {2})):
    scores = timings(os.path.join(sweep, name))["straggler_score"]  # [steps, ranks]
    check(np.isnan(scores[:7]).all() and not np.isnan(scores[7:]).any(),
          f"{name}: NaN where trident has not judged, and only there: {scores[:, 0]}")
    mine = sorted((r for r in rows if r["run"] == name), key=lambda r: int(r["rank"]))
    check(len(mine) == 4, f"{name}: {len(mine)} ranks")
    for r in mine:
        rank = int(r["rank"])
        close(float(r["median_score"]), float(np.median(scores[7:, rank])), f"{name} rank {rank}")
        close(float(r["lowest_score"]), float(scores[7:, rank].min()), f"{name} rank {rank} low")
        check(int(r["steps"]) == 13 and int(r["stage"]) == 0, f"{name}: {r}")
    named = {int(r["rank"]) for r in mine if r["named"] == "yes"}
    # The fixture runs beside other tests: only the slowed rank's 0.5 is sure to stand out.
    check(slow <= named, f"{name}: named {named}, expected {slow} among them")
check_markdown(os.path.join(out, "stragglers.md"), 8)
check_png(os.path.join(out, "stragglers.png"))

# The scaling table marks the run whose rank 2 lagged.
scaling_out = env.out("scaling")
env.script("scaling", sweep, "--kind", "weak", "--warmup", "2", "--out", scaling_out)
drift = {r["run"]: r["drift"] for r in read_csv(os.path.join(scaling_out, "scaling.csv"))}
check("rank 2 0." in drift.get("dp4_rank2_slow", ""), f"drift column {drift}")
print(f"stragglers: ok (drift column: {drift['dp4_rank2_slow']!r})")
