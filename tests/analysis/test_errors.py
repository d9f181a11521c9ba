# The analysis scripts' help, errors and warnings: missing paths, failed, partial, unreadable runs.
import json
import os
import shutil
import sys

from analysis_test import SCRIPTS, Env, check, check_markdown, read_csv

env = Env()
weak, killed = env.sweep("weak_scaling", 1001), env.sweep("weak_scaling", 1006)
only_pp1 = {"bubble": ["--include-pp1"]}  # the weak sweep has no pipeline

# --help: exit 0 and the usage with the documentation.
for name in SCRIPTS:
    stdout, _ = env.script(name, "--help")
    check(stdout.startswith("usage:") and "--out" in stdout and "--strict" in stdout,
          f"{name} --help:\n{stdout}")

# A missing path: exit 2 and a message naming it; an empty directory is neither kind.
missing = env.out("no/such/sweep")
empty = env.out("empty")
os.makedirs(empty)
for name in SCRIPTS:
    _, err = env.script(name, weak, missing, expect=2)
    check(err.startswith(f"{name}.py: error: {missing}: no such file"), f"{name} missing: {err}")
    _, err = env.script(name, empty, expect=2)
    check(f"{name}.py: error: {empty}: neither a sweep directory" in err, f"{name} empty: {err}")

# A sweep with broken runs next to the good ones (the weak sweep's three runs):
#   killed     rank 1 killed at step 5: status failed, 4 of 12 steps (real, from the fixture)
#   partial    the same timings.h5 with status completed: the file itself shows it is partial
#   truncated  a good run whose timings.h5 lost its second half (killed while writing)
#   running    the job died before the script recorded an outcome: status running, no timings
broken = env.out("broken")
shutil.copytree(weak, broken)
shutil.copytree(os.path.join(killed, "dp2_tp1_pp1"), os.path.join(broken, "killed"))
shutil.copytree(os.path.join(killed, "dp2_tp1_pp1"), os.path.join(broken, "partial"))
with open(os.path.join(broken, "partial", "status"), "w") as f:
    f.write("completed\n")
shutil.copytree(os.path.join(weak, "dp2_tp1_pp1"), os.path.join(broken, "truncated"))
h5 = os.path.join(broken, "truncated", "timings.h5")
os.truncate(h5, os.path.getsize(h5) // 2)
os.makedirs(os.path.join(broken, "running"))
with open(os.path.join(broken, "running", "status"), "w") as f:
    f.write("running\n")
with open(os.path.join(broken, "running", "run.json"), "w") as f:
    json.dump({"experiment": "weak_scaling", "job_id": "1001", "layout": "running"}, f)
reasons = {"killed": "status is 'failed'", "partial": "timings.h5 is partial: 4 of 12 steps",
           "truncated": "timings.h5 is unreadable", "running": "status is 'running'"}
for name in SCRIPTS:
    out = env.out(f"broken_{name}")
    _, err = env.script(name, broken, "--out", out, *only_pp1.get(name, []))
    lines = err.splitlines()
    check(len(lines) == len(reasons), f"{name}: expected one warning per broken run:\n{err}")
    for run, reason in reasons.items():
        mine = [line for line in lines if os.path.join(broken, run) + ":" in line]
        check(len(mine) == 1 and mine[0].startswith(f"{name}.py: warning: ") and reason in mine[0]
              and mine[0].endswith("left out"), f"{name}: warning for {run}:\n{err}")
    # Still a table for the three good runs.
    table = read_csv(os.path.join(out, f"{name}.csv"))
    check(sorted({r["run"] for r in table}) == ["dp1_tp1_pp1", "dp2_tp1_pp1", "dp4_tp1_pp1"],
          f"{name}: rows {sorted({r['run'] for r in table})}")
    check_markdown(os.path.join(out, f"{name}.md"), 3)
    # --strict: the first broken run is an error.
    _, err = env.script(name, broken, "--strict", "--out", env.out("x"), *only_pp1.get(name, []),
                        expect=2)
    check(err.startswith(f"{name}.py: error: {os.path.join(broken, 'killed')}: status is 'failed'"),
          f"{name} --strict:\n{err}")

# Only broken runs: nothing usable is an error.
_, err = env.script("scaling", killed, "--out", env.out("x"), expect=2)
check("scaling.py: warning:" in err and "scaling.py: error: no usable runs" in err,
      f"only a failed run: {err}")
_, err = env.script("breakdown", h5, expect=2)
check("timings.h5 is unreadable" in err and "error: no usable runs" in err, f"truncated h5: {err}")
_, err = env.script("memory", os.path.join(broken, "partial"), "--strict", expect=2)
check("memory.py: error:" in err and "partial: 4 of 12 steps" in err, f"partial --strict: {err}")

# Every step left out of timing is an error naming the run, not an empty table.
_, err = env.script("scaling", weak, "--warmup", "12", "--out", env.out("x"), expect=2)
check("scaling.py: error:" in err and "no timed steps" in err and "--warmup" in err,
      f"--warmup 12: {err}")

# An interpreter without h5py (or matplotlib): a message naming the module, the interpreter and
# the Debian packages, exit 2, no traceback. A package of the same name that fails to import
# stands in for the missing one.
for module in ("h5py", "matplotlib"):
    shim = env.out(f"without_{module}")
    os.makedirs(os.path.join(shim, module))
    with open(os.path.join(shim, module, "__init__.py"), "w") as f:
        f.write(f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n")
    for name in SCRIPTS:
        _, err = env.script(name, weak, "--out", env.out("x"), expect=2,
                            env={"PYTHONPATH": shim})
        check(err.startswith(f"{name}.py: error: the analysis needs the Python module "
                             f"'{module}'") and sys.executable in err and
              "apt-get install python3-h5py python3-numpy python3-pandas python3-matplotlib"
              in err, f"{name} without {module}:\n{err}")
print("errors: ok")
