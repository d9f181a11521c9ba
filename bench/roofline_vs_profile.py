# Sets a profiled step (trident train --profile-step) against the launch roofline (trident plan --roofline-table), label by label.
"""Measured against predicted, label by label, for bench/gpu_check.sh:

    roofline_vs_profile.py PROFILE_TSV ROOFLINE_TSV [--top 20]

PROFILE_TSV is <run dir>/profile_step_K.tsv, ROOFLINE_TSV what `trident plan --config ... --device
... --roofline-table FILE` wrote for the same config (both have the columns label, kind, calls,
total_ms). Copies are not launches and are left out. Prints the longest measured labels with
their predicted time and the ratio, every label whose calls differ, and key=value lines:

  roofline_labels_compared    labels in either table
  roofline_calls_mismatched   labels whose calls differ (0: the roofline names every launch)
  roofline_measured_ms        the profiled launches' total
  roofline_predicted_ms       the roofline's total
  roofline_top10_within_30    how many of the ten longest measured labels are within +-30 %
"""
import argparse
import csv
import sys


def read(path):
    with open(path) as f:
        rows = csv.DictReader((line for line in f if not line.startswith("#")), delimiter="\t")
        table = {}
        for r in rows:
            if r["kind"] == "copy":
                continue
            calls, ms = int(r["calls"]), float(r["total_ms"] or 0)
            if r["label"] in table:  # the same label as kernel and library call: add them
                calls += table[r["label"]][0]
                ms += table[r["label"]][1]
            table[r["label"]] = (calls, ms)
    if not table:
        sys.exit(f"roofline_vs_profile: error: no launch in {path}")
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("roofline")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    measured, predicted = read(args.profile), read(args.roofline)
    labels = sorted(set(measured) | set(predicted))
    mismatched = [(label, measured.get(label, (0, 0))[0], predicted.get(label, (0, 0))[0])
                  for label in labels
                  if measured.get(label, (0, 0))[0] != predicted.get(label, (0, 0))[0]]
    longest = sorted(((ms, label) for label, (calls, ms) in measured.items() if calls > 0),
                     reverse=True)
    print(f"{'label':<44} {'calls':>7} {'measured ms':>12} {'predicted ms':>13} {'ratio':>7}")
    within = 0
    for rank, (ms, label) in enumerate(longest[:args.top]):
        want = predicted.get(label, (0, 0))[1]
        ratio = ms / want if want > 0 else float("inf")
        if rank < 10 and 1 / 1.3 <= ratio <= 1.3:
            within += 1
        print(f"{label:<44} {measured[label][0]:>7} {ms:>12.3f} {want:>13.3f} {ratio:>7.2f}")
    for label, got, want in mismatched:
        print(f"calls differ: {label}: measured {got}, predicted {want}")
    print(f"roofline_labels_compared={len(labels)}")
    print(f"roofline_calls_mismatched={len(mismatched)}")
    print(f"roofline_measured_ms={sum(ms for _, ms in measured.values()):.3f}")
    print(f"roofline_predicted_ms={sum(ms for _, ms in predicted.values()):.3f}")
    print(f"roofline_top10_within_30={within}")


if __name__ == "__main__":
    main()
