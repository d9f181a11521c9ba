# Helpers for the analysis tests: run a script, check its files, recompute numbers from timings.h5.
import csv
import json
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

    def import_analysis(self, name):
        """analysis/NAME.py as a module, to look inside its figures."""
        import importlib
        sys.path.insert(0, os.path.join(self.src, "analysis"))
        return importlib.import_module(name)

    def script(self, name, *args, expect=0, env=None):
        """Runs analysis/NAME.py with args (env: extra environment variables); checks its exit
        status; returns (stdout, stderr)."""
        cmd = [sys.executable, os.path.join(self.src, "analysis", name + ".py"), *map(str, args)]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=self.work,
                           env={**os.environ, **(env or {})})
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
    body = [line for line in lines[2:] if line.startswith("|")]
    # Under the table, the command that made it, interpreter first (to rerun it as it ran).
    made_by = lines[2 + len(body):]
    check(len(made_by) == 1 and made_by[0].startswith("Made by `") and
          made_by[0][len("Made by `"):].split()[0].endswith("python3")
          and "analysis/" in made_by[0], f"{path}: no 'Made by' command under the table: {made_by}")
    check(len(body) == rows, f"{path}: {len(body)} table rows, expected {rows}")
    width = lines[0].count("|")
    for line in body:
        check(line.startswith("|") and line.endswith("|") and line.count("|") == width,
              f"{path}: malformed row {line!r}")
    return [[c.strip() for c in line.strip("|").split("|")] for line in body]


def text_attr(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def timings(run_dir):
    """Everything in a run's timings.h5, read independently of analysis/trident_runs.py."""
    with h5py.File(os.path.join(run_dir, "timings.h5"), "r") as f:
        data = {k: f[k][()] for k in f}
        data["phases"] = text_attr(f.attrs["phases"]).split(",")
        data["categories"] = text_attr(f.attrs["memory_categories"]).split(",")
        data["hostnames"] = text_attr(f.attrs["hostnames"]).split(",")
        data["flops_per_token"] = float(f.attrs["flops_per_token"])
        data["threads_per_rank"] = int(f.attrs["threads_per_rank"])
        data["node_cpus"] = int(f.attrs["node_cpus"])
    return data


def png_text(path):
    """The PNG's tEXt chunks {keyword: text} (the scripts put their figure notes in
    Description)."""
    import struct
    import zlib
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    pos = 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            out[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            flag = rest[0]
            rest = rest[2:].split(b"\0", 2)[2]
            out[key.decode("latin-1")] = (zlib.decompress(rest) if flag else rest).decode()
        pos += 12 + length
    return out


def copy_sweep(src, dst, job=None):
    """A copy of a sweep directory; job: a new sweep.json job_id."""
    shutil.copytree(src, dst)
    if job is not None:
        edit_json(os.path.join(dst, "sweep.json"), job_id=str(job))
    return dst


def edit_json(path, drop=(), **values):
    with open(path) as f:
        value = json.load(f)
    value.update(values)
    for key in drop:
        value.pop(key, None)
    with open(path, "w") as f:
        json.dump(value, f)


def set_attrs(run_dir, **attrs):
    """Sets (value) or deletes (None) attributes of a run's timings.h5."""
    with h5py.File(os.path.join(run_dir, "timings.h5"), "r+") as f:
        for key, value in attrs.items():
            if value is None:
                if key in f.attrs:
                    del f.attrs[key]
            else:
                f.attrs[key] = value


def timed_mask(data, warmup=3):
    """The steps after the first `warmup` that wrote no checkpoint on any rank."""
    io = data["phase_seconds"][:, :, data["phases"].index("io")].max(axis=1)
    return (np.arange(len(data["step"])) >= warmup) & (io == 0)
