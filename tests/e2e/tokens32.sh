#!/usr/bin/env bash
# 32-bit token files: `prepare --token-bytes 4` writes the shipped corpus's ids in version 2 (the
# same ids as the 16-bit files, which still train as they are); a tiny Llama with a vocabulary of
# 70,000 trains from them serially and on 4 ranks (dp 2 x tp 2) equal to serial; an id past the
# vocabulary stops the run before any file is written, naming the file and the position.
set -euo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
# The shipped corpus is byte-level: its ids are the text's bytes.
/usr/bin/python3 - data/kjv_train.bin data/kjv_val.bin "$work/kjv.txt" <<'PY'
import sys
import numpy as np
with open(sys.argv[3], "wb") as out:
    for path in sys.argv[1:3]:
        out.write(np.fromfile(path, dtype=np.uint16, offset=1024).astype(np.uint8).tobytes())
PY
"$trident" prepare --text "$work/kjv.txt" --out-dir "$work" --name kjv32 --token-bytes 4 \
  --val-fraction 0.05 2> "$work/prepare.log"
/usr/bin/python3 - "$work/kjv32_train.bin" "$work/kjv.txt" <<'PY'
import sys
import numpy as np
header = np.fromfile(sys.argv[1], dtype=np.int32, count=256)
ids = np.fromfile(sys.argv[1], dtype=np.uint32, offset=1024)
text = np.frombuffer(open(sys.argv[2], "rb").read(), dtype=np.uint8)
assert header[0] == 20240520 and header[1] == 2 and header[2] == len(ids), header[:3]
assert (ids == text[: len(ids)]).all(), "the 32-bit ids are not the text's bytes"
print(f"32-bit token file: version 2, {len(ids)} ids, the corpus's bytes")
PY
LAYOUT_SETS="data.train=$work/kjv32_train.bin data.val=$work/kjv32_val.bin model.vocab_size=70000" \
  TRIDENT_TEST_RUN=llama-tiny bash tests/e2e/layout_vs_serial.sh "$trident" "$src" "$work/layout" \
  2 2 1 1f1b 1 0 none 1
if "$trident" train --config inputs/llama-tiny.toml --set data.train="$work/kjv32_train.bin" \
  --set data.val="$work/kjv32_val.bin" --set model.vocab_size=100 \
  --set run.out_dir="$work/refused" > "$work/refused.log" 2>&1; then
  echo "FAIL: ids past the vocabulary were accepted"; exit 1
fi
grep -q "data file '$work/kjv32_train.bin' holds token 1[0-9][0-9] at position [0-9]* but model.vocab_size = 100" \
  "$work/refused.log" || { echo "FAIL: the refusal does not name the file and position:"; cat "$work/refused.log"; exit 1; }
[ ! -e "$work/refused" ] || { echo "FAIL: the refused run wrote $work/refused"; exit 1; }
echo "32-bit token files: ok"
