# analysis/moe_load.py on the fixture's MoE runs: per-layer load recomputed from timings.h5.
import os

import numpy as np

from analysis_test import Env, check, check_markdown, check_png, close, read_csv, timings

env = Env()
sweep = env.sweep("moe_balance", 1007)
out = env.out("balance")
stdout, _ = env.script("moe_load", sweep, "--out", out)
check("| run |" in stdout, f"table not printed:\n{stdout}")
rows = read_csv(os.path.join(out, "moe_load.csv"))
check(sorted({r["run"] for r in rows}) == ["dp2_capacity1", "dp2_ep2"], f"runs {rows}")
for name in ("dp2_ep2", "dp2_capacity1"):
    data = timings(os.path.join(sweep, name))
    tokens = data["moe_tokens_per_expert"]  # [steps, layers, experts]
    mine = [r for r in rows if r["run"] == name]
    check(sorted(int(r["layer"]) for r in mine) == [0, 2], f"{name}: layers {mine}")
    # Every step routes batch x seq x k slots per layer: 8 x 16 tokens, top-2.
    check((tokens.sum(axis=2) == 8 * 16 * 2).all(), f"{name}: slots per layer {tokens.sum(axis=2)}")
    for j, r in enumerate(sorted(mine, key=lambda r: int(r["layer"]))):
        last = tokens[-1, j]
        close(float(r["last_imbalance"]), last.max() / last.mean(), f"{name} layer {r['layer']}")
        ratios = tokens[:, j].max(axis=1) / tokens[:, j].mean(axis=1)
        close(float(r["mean_imbalance"]), ratios.mean(), f"{name} mean imbalance")
        close(float(r["mean_dropped"]) + 1, data["moe_layer_dropped_fraction"][:, j].mean() + 1,
              f"{name} dropped")
        check(int(r["steps"]) == 12 and int(r["experts"]) == 8, f"{name}: {r}")
    dropped = data["moe_layer_dropped_fraction"]
    if name == "dp2_capacity1":
        check((dropped > 0).all(), f"capacity 1 dropped nothing somewhere: {dropped}")
    else:
        check((dropped == 0).all(), f"dropless run dropped: {dropped}")
    # The step's overall numbers are the per-layer ones combined.
    close(data["moe_aux_loss"][-1], data["moe_layer_aux_loss"][-1].mean(), f"{name} aux")
slots = read_csv(os.path.join(out, "moe_load_slots.csv"))
check(len(slots) == 2 * 12 * 2 * 8, f"slots table: {len(slots)} rows")
shares = {}
for s in slots:
    key = (s["run"], s["step"], s["layer"])
    shares[key] = shares.get(key, 0.0) + float(s["share"])
check(all(abs(v - 1) < 1e-9 for v in shares.values()), "shares do not sum to 1 per layer and step")
check_markdown(os.path.join(out, "moe_load.md"), 4)
check_png(os.path.join(out, "moe_load.png"))

# A dense run is left out with a warning; only dense runs is an error.
_, err = env.script("moe_load", sweep, env.sweep("weak_scaling", 1001), "--out", env.out("mixed"))
check("left out" in err, f"no warning for dense runs:\n{err}")
_, err = env.script("moe_load", env.sweep("weak_scaling", 1001), "--out", env.out("dense"), expect=2)
check("Mixture-of-Experts" in err, f"dense-only error unclear:\n{err}")
print("moe_load: ok")
