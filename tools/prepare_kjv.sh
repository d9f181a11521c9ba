#!/usr/bin/env bash
# Builds data/kjv_{train,val}.bin: the King James Bible (Debian's bible-kjv, public domain) as
# plain text without verse references, tokenised byte-level by `trident prepare`.
set -euo pipefail
trident=${1:?usage: prepare_kjv.sh path/to/trident [out_dir]}
out_dir=${2:-data}
if [ -f "$out_dir/kjv_train.bin" ] && [ -f "$out_dir/kjv_val.bin" ]; then
  exit 0
fi
command -v bible >/dev/null || { echo "prepare_kjv: 'bible' not found (apt-get install bible-kjv)" >&2; exit 1; }
mkdir -p "$out_dir"
text="$out_dir/kjv.txt.tmp"
echo "prepare_kjv: extracting the King James Bible with bible-kjv" >&2
# `bible -f` prints one verse per line as "Ge1:1 In the beginning ..."; drop the reference.
bible -f "Gen1:1-Rev22:21" | sed -E 's/^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$text"
"$trident" prepare --text "$text" --out-dir "$out_dir" --name kjv --val-fraction 0.05
rm -f "$text"
