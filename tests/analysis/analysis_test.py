# Helpers for the analysis tests: run a script, check its files, recompute numbers from timings.h5.
import csv
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCRIPTS = ("scaling", "breakdown", "memory", "bubble", "convergence")


class Env:
    """argv: SRC_DIR FIXTURE_DIR WORK_DIR; WORK_DIR is emptied."""

    def __init__(self):
        if len(sys.argv) != 4:
            sys.exit(f"usage: {sys.argv[0]} SRC_DIR FIXTURE_DIR WORK_DIR")
        self.src, fixture, self.work = map(os.path.abspath, sys.argv[1:])
        self.runs = os.path.join(fixture, "runs")
        if not os.path.isdir(self.runs):
            fail(f"{self.runs} is missing: run the analysis.sweeps test (the fixture) first")
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def sweep(self, experiment, job):
        return os.path.join(self.runs, experiment, str(job))

    def out(self, name):
        return os.path.join(self.work, name)

    def script(self, name, *args, expect=0):
        """Runs analysis/NAME.py with args; checks its exit status; returns (stdout, stderr)."""
        cmd = [sys.executable, os.path.join(self.src, "analysis", name + ".py"), *map(str, args)]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=self.work)
        shown = f"$ {' '.join(cmd)}\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}"
        if p.returncode != expect:
            fail(f"exit status {p.returncode}, expected {expect}\n{shown}")
        if "Traceback" in p.stderr:
            fail(f"a traceback instead of a message\n{shown}")
        return p.stdout, p.stderr


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def close(a, b, what, rtol=1e-9):
    check(abs(a - b) <= rtol * max(abs(a), abs(b)), f"{what}: {a!r} != {b!r} (rtol {rtol})")


def read_csv(path):
    check(os.path.isfile(path), f"{path} was not written")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_png(path, min_bytes=10_000):
    check(os.path.isfile(path), f"{path} was not written")
    with open(path, "rb") as f:
        head = f.read(8)
    check(head == PNG_SIGNATURE, f"{path} does not start with the PNG signature")
    size = os.path.getsize(path)
    check(size >= min_bytes, f"{path} has {size} bytes: nothing drawn?")


def check_markdown(path, rows, first_column="run"):
    """A header, the separator, then exactly `rows` table rows; returns the rows' cells."""
    check(os.path.isfile(path), f"{path} was not written")
    with open(path) as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    check(lines and lines[0].startswith(f"| {first_column} |"), f"{path}: no header: {lines[:1]}")
    check(len(lines) > 1 and set(lines[1].replace(" ", "")) <= set("|-:"),
          f"{path}: no separator line under the header")
    body = lines[2:]
    check(len(body) == rows, f"{path}: {len(body)} table rows, expected {rows}")
    width = lines[0].count("|")
    for line in body:
        check(line.startswith("|") and line.endswith("|") and line.count("|") == width,
              f"{path}: malformed row {line!r}")
    return [[c.strip() for c in line.strip("|").split("|")] for line in body]


def timings(run_dir):
    """Everything in a run's timings.h5, read independently of analysis/trident_runs.py."""
    with h5py.File(os.path.join(run_dir, "timings.h5"), "r") as f:
        data = {k: f[k][()] for k in f}
        data["phases"] = f.attrs["phases"].split(",")
        data["categories"] = f.attrs["memory_categories"].split(",")
        data["hostnames"] = f.attrs["hostnames"].split(",")
        data["flops_per_token"] = float(f.attrs["flops_per_token"])
        data["threads_per_rank"] = int(f.attrs["threads_per_rank"])
    return data


def timed_mask(data, warmup=3):
    """The steps after the first `warmup` that wrote no checkpoint on any rank."""
    io = data["phase_seconds"][:, :, data["phases"].index("io")].max(axis=1)
    return (np.arange(len(data["step"])) >= warmup) & (io == 0)
