# Provenance: runs that differ in git revision, BLAS kernel or CPU model are refused unless
# --allow-mixed-provenance; old files (no cpu_model, string numbers) and new ones (numbers) load.
import os
import re

import h5py
import numpy as np

from analysis_test import SCRIPTS, Env, check, close, copy_sweep, edit_json, png_text, read_csv, \
    set_attrs, text_attr

env = Env()
weak = env.sweep("weak_scaling", 1001)
LAYOUTS = ("dp1_tp1_pp1", "dp2_tp1_pp1", "dp4_tp1_pp1")
ARGS = {"scaling": ["--kind", "weak"], "bubble": ["--include-pp1"]}
# What the fixture's trident recorded (a newer one adds cpu_model).
with h5py.File(os.path.join(weak, LAYOUTS[0], "timings.h5"), "r") as f:
    REVISION = text_attr(f.attrs["git_revision"])[:7]
    BLAS = text_attr(f.attrs["blas"])
    CPU = text_attr(f.attrs["cpu_model"]) if "cpu_model" in f.attrs else "unknown CPU"
KERNEL = re.search(r"kernel (\S+)", BLAS).group(1)
OTHER_KERNEL = "Haswell" if KERNEL == "SkylakeX" else "SkylakeX"


def each_run(sweep, **attrs):
    for name in LAYOUTS:
        set_attrs(os.path.join(sweep, name), **attrs)


def refused(sweeps, what, names):
    """Every script refuses the sweeps, naming `what` and each of `names`; with the flag it
    warns, and the figure carries the caveat."""
    for script in SCRIPTS:
        _, err = env.script(script, *sweeps, *ARGS.get(script, []), "--out", env.out("x"),
                            expect=2)
        check(err.startswith(f"{script}.py: error: the runs differ in provenance") and what in err
              and "--allow-mixed-provenance" in err and all(n in err for n in names),
              f"{script}: refusal should name {what} and {names}:\n{err}")
        out = env.out(f"mixed_{script}")
        _, err = env.script(script, *sweeps, *ARGS.get(script, []), "--out", out,
                            "--allow-mixed-provenance")
        check(f"{script}.py: warning: the runs differ in provenance" in err and what in err,
              f"{script} --allow-mixed-provenance: no warning naming {what}:\n{err}")
        notes = png_text(os.path.join(out, f"{script}.png")).get("Description", "")
        check(f"caveat: mixed provenance, {what}" in notes,
              f"{script}.png: no mixed-provenance caveat on the figure: {notes!r}")


# The same provenance in two sweeps: accepted, and their runs are repeats of each other.
a = copy_sweep(weak, env.out("a"), job=2001)
b = copy_sweep(weak, env.out("b"), job=2002)
out = env.out("same")
env.script("scaling", a, b, "--out", out)
rows = read_csv(os.path.join(out, "scaling.csv"))
check([int(r["repeats"]) for r in rows] == [2, 2, 2], f"two copies of a sweep: repeats "
      f"{[r['repeats'] for r in rows]}, expected 2 per layout")
notes = png_text(os.path.join(out, "scaling.png"))["Description"]
for text in ("config tiny.toml", CPU, "2 threads/rank", f"kernel {KERNEL}", "job 2001 / 2002",
             f"git {REVISION}"):
    check(text in notes, f"caption lacks {text!r}: {notes!r}")

# A BLAS kernel of its own in sweep b: refused, naming both sweeps and both kernels.
each_run(b, blas=BLAS.replace(f"kernel {KERNEL}", f"kernel {OTHER_KERNEL}"))
refused([a, b], "BLAS kernel", [f"'{OTHER_KERNEL}'", f"'{KERNEL}'", a, b])

# One run of another revision: named by its directory (not its whole sweep).
c = copy_sweep(weak, env.out("c"), job=2003)
set_attrs(os.path.join(c, "dp2_tp1_pp1"), git_revision="0123456789ab")
refused([a, c], "git revision", ["'0123456'", f"'{REVISION}'", os.path.join(c, "dp2_tp1_pp1")])

# CPU model from timings.h5 (new attribute) against sweep.json's provenance: refused.
d = copy_sweep(weak, env.out("d"), job=2004)
each_run(d, cpu_model="Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz")
e = copy_sweep(weak, env.out("e"), job=2005)
each_run(e, cpu_model=None)  # an older trident under newer jobs/: sweep.json has the CPU
edit_json(os.path.join(e, "sweep.json"), provenance={
    "git_revision": REVISION + "0" * 33, "git_dirty": False,
    "cpu_model": "AMD EPYC 7742 64-Core Processor", "cores_per_node": 128,
    "blas": BLAS, "blas_kernel": KERNEL,
    "kokkos_backend": "OpenMP", "threads_per_rank": 2, "mpi": "Open MPI 4.1.4",
    "launcher": "srun", "slurm_job_id": "2005", "slurm_nodelist": "n[1-2]",
    "env": {"OMP_NUM_THREADS": "2"}})
refused([d, e], "CPU model", ["Intel(R) Xeon(R) Gold 6148", "AMD EPYC 7742"])
# A file without cpu_model is unknown, not different: accepted; the caption names the CPU.
old = copy_sweep(weak, env.out("old"), job=2006)
each_run(old, cpu_model=None)
out = env.out("unknown_cpu")
env.script("scaling", d, old, "--out", out)
notes = png_text(os.path.join(out, "scaling.png"))["Description"]
check("Intel(R) Xeon(R) Gold 6148" in notes, f"caption lacks the CPU model: {notes!r}")
out = env.out("sweep_provenance")
env.script("scaling", e, "--out", out)
notes = png_text(os.path.join(out, "scaling.png"))["Description"]
check("AMD EPYC 7742 64-Core Processor, 128 cores/node" in notes and "job 2005" in notes,
      f"caption from sweep.json's provenance: {notes!r}")

# Numeric attributes stored as HDF5 numbers (newer trident) and strings as fixed-length bytes:
# the same table as the string attributes give.
n = copy_sweep(weak, env.out("numbers"), job=1001)
each_run(n, threads_per_rank=np.int64(2), blas_threads=np.int64(1), parameters=np.int64(60096),
         flops_per_token=np.float64(385152.0), peak_lr=np.float64(1e-3),
         blas=np.bytes_(BLAS.encode()), git_revision=np.bytes_(REVISION.encode()))
strings, numbers = env.out("strings_out"), env.out("numbers_out")
env.script("scaling", weak, "--out", strings)
env.script("scaling", n, "--out", numbers)
for s, m in zip(read_csv(os.path.join(strings, "scaling.csv")),
                read_csv(os.path.join(numbers, "scaling.csv"))):
    check((s["threads"], s["parameters"]) == (m["threads"], m["parameters"]) == ("2", "60096"),
          f"numeric attributes: threads {m['threads']}, parameters {m['parameters']}")
    close(float(m["tflops_per_rank"]), float(s["tflops_per_rank"]), "tflops from numbers")
notes = png_text(os.path.join(numbers, "scaling.png"))["Description"]
check(f"kernel {KERNEL}" in notes and f"git {REVISION}" in notes, f"bytes attributes: {notes!r}")
print("provenance: ok")
