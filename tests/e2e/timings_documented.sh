#!/usr/bin/env bash
# timings.h5 is self-describing: every dataset and attribute a run writes is listed in
# docs/checkpoints-and-faults.md with its units or type, and every listed one is in the file of a
# dense run, or of a Mixture-of-Experts run for those the docs say only MoE runs write.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
"$trident" train --config inputs/tiny.toml --set run.steps=3 --set run.checkpoint_every=-1 \
  --set run.out_dir="$work" >"$work/train.log" 2>&1 || { tail "$work/train.log"; exit 1; }
"$trident" train --config inputs/moe-tiny.toml --set run.steps=3 --set run.checkpoint_every=-1 \
  --set run.out_dir="$work" >"$work/train_moe.log" 2>&1 || { tail "$work/train_moe.log"; exit 1; }
/usr/bin/python3 - "$work/tiny/timings.h5" "$work/moe-tiny/timings.h5" docs/checkpoints-and-faults.md <<'PY'
import re, sys
import h5py
import numpy as np

dense_path, moe_path, doc = sys.argv[1], sys.argv[2], sys.argv[3]
datasets, attributes, moe_only = {}, {}, set()
with open(doc, encoding="utf-8") as f:
    for line in f:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([a-z_0-9]+)`", cells[0])
        if "MoE runs only" in cells[-1]:
            moe_only.update(names)
        if len(cells) == 4 and cells[1].startswith("["):  # dataset | shape | units | meaning
            for name in names:
                datasets[name] = cells[2]
        elif len(cells) == 3 and cells[1] in ("text", "integer", "float"):
            for name in names:
                attributes[name] = cells[1]
problems = []
kinds = {"text": str, "integer": np.integer, "float": np.floating}
for path, moe in ((dense_path, False), (moe_path, True)):
    f = h5py.File(path, "r")
    run = "MoE run" if moe else "dense run"
    for name in f:
        if name not in datasets:
            problems.append(f"{run}: dataset '{name}' is not documented")
        elif f[name].attrs.get("units") != datasets[name]:
            problems.append(f"{run}: dataset '{name}': units {f[name].attrs.get('units')!r}, "
                            f"documented {datasets[name]!r}")
    for name in datasets:
        if (name in f) != (moe or name not in moe_only):
            problems.append(f"{run}: documented dataset '{name}' is "
                            f"{'in' if name in f else 'not in'} the file")
    for name, value in f.attrs.items():
        if name not in attributes:
            problems.append(f"{run}: attribute '{name}' is not documented")
        elif not isinstance(value, kinds[attributes[name]]):
            problems.append(f"{run}: attribute '{name}' is {type(value).__name__}, documented "
                            f"{attributes[name]}")
    for name in attributes:
        if (name in f.attrs) != (moe or name not in moe_only):
            problems.append(f"{run}: documented attribute '{name}' is "
                            f"{'in' if name in f.attrs else 'not in'} the file")
if not datasets or not attributes:
    problems.append(f"no dataset or attribute table found in {doc}")
for p in problems:
    print("FAIL:", p)
print(f"{len(datasets)} datasets, {len(attributes)} attributes documented; "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PY
