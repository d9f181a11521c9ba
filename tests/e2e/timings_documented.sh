#!/usr/bin/env bash
# timings.h5 is self-describing: every dataset and attribute a run writes is listed in
# docs/checkpoints-and-faults.md with its units or type, and every listed one is in the file.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
"$trident" train --config inputs/tiny.toml --set run.steps=3 --set run.checkpoint_every=-1 \
  --set run.out_dir="$work" >"$work/train.log" 2>&1 || { tail "$work/train.log"; exit 1; }
/usr/bin/python3 - "$work/tiny/timings.h5" docs/checkpoints-and-faults.md <<'PY'
import re, sys
import h5py
import numpy as np

path, doc = sys.argv[1], sys.argv[2]
datasets, attributes = {}, {}
with open(doc, encoding="utf-8") as f:
    for line in f:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([a-z_0-9]+)`", cells[0])
        if len(cells) == 4 and cells[1].startswith("["):  # dataset | shape | units | meaning
            for name in names:
                datasets[name] = cells[2]
        elif len(cells) == 3 and cells[1] in ("text", "integer", "float"):
            for name in names:
                attributes[name] = cells[1]
problems = []
f = h5py.File(path, "r")
for name in f:
    if name not in datasets:
        problems.append(f"dataset '{name}' is not documented")
    elif f[name].attrs.get("units") != datasets[name]:
        problems.append(f"dataset '{name}': units {f[name].attrs.get('units')!r}, "
                        f"documented {datasets[name]!r}")
for name in datasets:
    if name not in f:
        problems.append(f"documented dataset '{name}' is not in the file")
kinds = {"text": str, "integer": np.integer, "float": np.floating}
for name, value in f.attrs.items():
    if name not in attributes:
        problems.append(f"attribute '{name}' is not documented")
    elif not isinstance(value, kinds[attributes[name]]):
        problems.append(f"attribute '{name}' is {type(value).__name__}, documented "
                        f"{attributes[name]}")
for name in attributes:
    if name not in f.attrs:
        problems.append(f"documented attribute '{name}' is not in the file")
if not datasets or not attributes:
    problems.append(f"no dataset or attribute table found in {doc}")
for p in problems:
    print("FAIL:", p)
print(f"{len(datasets)} datasets, {len(attributes)} attributes documented; "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PY
