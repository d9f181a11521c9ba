#!/usr/bin/env python3
# Fits the planner's two compute constants (GEMM efficiency, HBM efficiency) to Narayanan et al. 2021, Table 1.
"""Grid search of `trident plan --mfu M --hbm-efficiency E` over the configs of
inputs/paper/narayanan2021/, minimising the worst relative error of the predicted TFLOP/s per GPU
(CONFIG_TIME) against the published figure on the fitting rows only (1.7B, 7.5B, 39.1B, 145.6B,
529.6B); prints the best pair and every row's error at it, the held-out rows included.

usage: tools/fit_time_model.py BUILD_DIR
"""
import pathlib
import subprocess
import sys

PUBLISHED = {"1.7b": 137, "3.6b": 138, "7.5b": 142, "18.4b": 135, "39.1b": 138, "76.1b": 140,
             "145.6b": 148, "310.1b": 155, "529.6b": 163, "1t": 163}
FITTED = ["1.7b", "7.5b", "39.1b", "145.6b", "529.6b"]
GEMM = [0.6, 0.65, 0.7, 0.72, 0.75, 0.78, 0.8, 0.85, 0.9]
HBM = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0]


def predict(trident, root, size, gemm, hbm):
    config = root / "inputs" / "paper" / "narayanan2021" / f"gpt-{size}.toml"
    out = subprocess.run([str(trident), "plan", "--config", str(config), "--top", "0", "--mfu",
                          str(gemm), "--hbm-efficiency", str(hbm)],
                         capture_output=True, text=True, check=True, cwd=root).stdout
    line = next(l for l in out.splitlines() if l.startswith("CONFIG_TIME"))
    return float(line.split("tflops_per_gpu=")[1].split()[0])


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = pathlib.Path(__file__).resolve().parent.parent
    trident = pathlib.Path(sys.argv[1]).resolve() / "src" / "trident"
    best = None
    for gemm in GEMM:
        for hbm in HBM:
            worst = max(abs(predict(trident, root, s, gemm, hbm) / PUBLISHED[s] - 1) for s in FITTED)
            if best is None or worst < best[0]:
                best = (worst, gemm, hbm)
    worst, gemm, hbm = best
    print(f"best: GEMM efficiency {gemm}, HBM efficiency {hbm}: worst fitted-row error {worst:.3f}")
    for size, published in PUBLISHED.items():
        p = predict(trident, root, size, gemm, hbm)
        tag = "fitted" if size in FITTED else "held out"
        print(f"{size:>7} {p:7.1f} published {published} error {p / published - 1:+.3f} ({tag})")


if __name__ == "__main__":
    main()
