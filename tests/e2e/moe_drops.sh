#!/usr/bin/env bash
# Mixture of Experts with a capacity (factor 1: experts overflow and drop slots) on one layout,
# under both drop policies: losses, norms and gradients equal the serial run's (layout_vs_serial.sh),
# drops happen (asserted), and every step's dropped share is the serial run's bit for bit (the
# same slots dropped in the same groups).
set -euo pipefail
trident=$1 src=$2 work=$3
shift 3  # the layout: dp tp pp schedule v zero
rm -rf "$work" && mkdir -p "$work"
for policy in probs position; do
  LAYOUT_SETS="model.capacity_factor=1.0 model.drop_policy=$policy" TRIDENT_TEST_RUN=moe-tiny \
    bash "$src/tests/e2e/layout_vs_serial.sh" "$trident" "$src" "$work/$policy" "$@"
  /usr/bin/python3 - "$work/$policy" "$policy" <<'PYEOF'
import sys
import h5py
import numpy as np
work, policy = sys.argv[1], sys.argv[2]
def dropped(run):
    with h5py.File(f"{work}/{run}/moe-tiny/timings.h5", "r") as f:
        return np.asarray(f["moe_dropped_fraction"])
serial, layout = dropped("serial"), dropped("layout")
if not (serial > 0).all():
    sys.exit(f"FAIL ({policy}): a step dropped nothing; the capacity should overflow: {serial}")
if not np.array_equal(serial, layout):
    sys.exit(f"FAIL ({policy}): dropped shares differ from the serial run's:\n{serial}\n{layout}")
print(f"{policy}: drops on every step ({serial.min():.3f} to {serial.max():.3f} of the slots), "
      "the serial run's at each")
PYEOF
done
