#!/usr/bin/env bash
# The jobs/ scripts outside Slurm (LAUNCHER=mpirun): guard, --help, every study's runs and analysis, failure and timeout statuses.
# usage: jobs_local.sh TRIDENT_EXE SOURCE_DIR WORK_DIR
set -euo pipefail
exe=$(realpath "$1")
src=$(realpath "$2")
work=$3
rm -rf "$work"
mkdir -p "$work"
work=$(realpath "$work")
cd "$src"
unset SLURM_JOB_ID
export TRIDENT=$exe CONFIG=inputs/tiny.toml RUNS_DIR=$work/runs RANKS_PER_NODE=4 WARMUP=2

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# run_job NAME SCRIPT [ENV=VALUE ...]: runs a study, keeps its output in $work/NAME.out and its
# exit code in $rc, and sets $sweep to the sweep directory it reported (empty when refused).
run_job() {
  local name=$1 script=$2
  shift 2
  rc=0
  env "$@" LAUNCHER=mpirun bash "jobs/$script" >"$work/$name.out" 2>&1 || rc=$?
  sweep=$({ grep -o 'outputs in [^ ]*' "$work/$name.out" || true; } | head -n 1 | cut -d' ' -f3)
  echo "--- $name (exit $rc): $sweep"
  cat "$work/$name.out"
}
status_of() { cat "$sweep/$1/status"; }
expect_status() {
  [[ -f $sweep/$1/status ]] || fail "$sweep/$1/status is missing"
  [[ $(status_of "$1") == "$2" ]] || fail "$1: status $(status_of "$1"), want $2"
}
# wait_for_line FILE PATTERN: until FILE holds a line matching PATTERN (30 s at most).
wait_for_line() {
  for _ in $(seq 300); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
}
# start_weak_scaling OUT [ENV=VALUE ...]: a long weak-scaling sweep in the background, its output
# in OUT; sets job_pid, and sweep once the job has named it.
start_weak_scaling() {
  local out=$1
  shift
  env "$@" LAUNCHER=mpirun STEPS=1000000 bash jobs/weak_scaling.sh >"$out" 2>&1 &
  job_pid=$!
  wait_for_line "$out" "outputs in"
  sweep=$(grep -o 'outputs in [^ ]*' "$out" | cut -d' ' -f3)
}
# signal_when_logged LOG PATTERN PID OUT: once LOG holds PATTERN (30 s at most), SIGUSR1 to the job
# PID, as Slurm's --signal=B:USR1 sends it; waits for the job, sets $rc and prints its output OUT.
signal_when_logged() {
  wait_for_line "$1" "$2"
  kill -USR1 "$3"
  rc=0
  wait "$3" || rc=$?
  cat "$4"
}
png() { [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' ') == 89504e470d0a1a0a ]] || fail "$1 is not a PNG"; }

# Outside Slurm without LAUNCHER: refuse, and say how to run it.
for script in weak_scaling strong_scaling layout_sweep zero_memory convergence train; do
  rc=0
  bash "jobs/$script.sh" >"$work/guard.out" 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "$script outside Slurm exited $rc, want 2"
  grep -q "sbatch jobs/$script.sh" "$work/guard.out" || fail "$script guard does not say sbatch"
  grep -q "LAUNCHER=mpirun" "$work/guard.out" || fail "$script guard does not say LAUNCHER=mpirun"
  help=$(bash "jobs/$script.sh" --help) || fail "$script --help exited non-zero"
  [[ $help == "usage: sbatch"* && $help == *"common environment variables"* ]] ||
    fail "$script --help: $help"
  rc=0
  LAUNCHER=mpirun bash "jobs/$script.sh" --steps=3 >"$work/arg.out" 2>&1 || rc=$?
  [[ $rc == 2 ]] && grep -q "unknown argument '--steps=3'" "$work/arg.out" ||
    fail "$script accepted an unknown argument"
done
[[ ! -d $work/runs ]] || fail "a refused job wrote outputs"

# Strong scaling: one global batch at 1, 2 and 4 ranks.
run_job strong strong_scaling.sh STEPS=6 GLOBAL_BATCH=8
[[ $rc == 0 ]] || fail "strong_scaling exited $rc"
for dp in 1 2 4; do expect_status "n1_dp${dp}_tp1_pp1" completed; done
png "$sweep/scaling.png"
png "$sweep/breakdown.png"
"${PYTHON:-/usr/bin/python3}" - "$sweep" "${OMP_NUM_THREADS:-1}" <<'PY'
import json, os, sys
from pathlib import Path
import h5py
sweep, threads = Path(sys.argv[1]), int(sys.argv[2])
assert json.loads((sweep / "sweep.json").read_text())["experiment"] == "strong_scaling"
for dp in (1, 2, 4):
    run = sweep / f"n1_dp{dp}_tp1_pp1"
    meta = json.loads((run / "run.json").read_text())
    assert (meta["ranks"], meta["dp"], meta["global_batch"], meta["status"]) == (dp, dp, 8, "completed"), meta
    # THREADS_PER_RANK follows OMP_NUM_THREADS outside Slurm; one rank gets both cores, more
    # ranks than that are left unbound.
    assert meta["threads_per_rank"] == threads, (meta, threads)
    command = (run / "command").read_text()
    if threads > 1:
        fits = dp * threads <= len(os.sched_getaffinity(0))
        expected = f"--map-by slot:PE={threads} --bind-to core" if fits else "--bind-to none"
        assert expected in command, (expected, command)
        # Oversubscribed, idle OpenMP threads must sleep rather than spin on another rank's core.
        assert ("-x OMP_WAIT_POLICY=" in command) == (not fits), command
    with h5py.File(run / "timings.h5", "r") as f:
        assert int(f.attrs["threads_per_rank"]) == threads, f.attrs["threads_per_rank"]
        assert (f["tokens"][:] == 8 * 16).all()  # the same global batch at every size
        assert f["phase_seconds"].shape[1] == dp and f["step"].shape == (6,)
    assert not (run / "checkpoints").exists()  # KEEP_CHECKPOINTS=0: run.checkpoint_every=-1
PY

# REPEATS: every layout twice, round robin, into <layout>_rep<k>; run.json and sweep.json say so,
# sweep.json records the provenance, the analysis aggregates the repeats. The job log names both
# step times, shows each trident warning once, prints each analysis command as run (interpreter
# included) and ends up in the sweep directory.
run_job repeats weak_scaling.sh STEPS=5 RANK_COUNTS="1 2" REPEATS=2
[[ $rc == 0 ]] || fail "weak_scaling REPEATS=2 exited $rc"
runs="n1_dp1_tp1_pp1_rep1 n1_dp2_tp1_pp1_rep1 n1_dp1_tp1_pp1_rep2 n1_dp2_tp1_pp1_rep2"
for run in $runs; do expect_status "$run" completed; done
[[ ! -e $sweep/n1_dp1_tp1_pp1 ]] || fail "REPEATS=2 also wrote n1_dp1_tp1_pp1/"
order=$(grep -oE '  n1_dp[12]_tp1_pp1_rep[12]: completed' "$work/repeats.out" | tr -s ' \n' ' ' |
  sed 's/: completed//g')
[[ $order == " ${runs} " ]] || fail "repeats not round robin: $order"
grep -qE '  n1_dp2_tp1_pp1_rep2: completed in [0-9.]+s mean_ms_after_step1=[0-9.]+ median_ms_after_warmup2=[0-9.]+$' \
  "$work/repeats.out" || fail "the per-run line does not name both step times"
interpreter=$(sed -n 's/.*analysis interpreter: //p' "$work/repeats.out")
"$interpreter" -c 'import h5py, numpy, pandas, matplotlib' || fail "chose $interpreter"
for script in scaling breakdown; do
  grep -qxF "  $interpreter $src/analysis/$script.py --warmup 2 $sweep" "$work/repeats.out" ||
    fail "no copy-pasteable $script.py command"
done
# Each warning once, naming the first run (in the order they ran) whose log has it.
while IFS= read -r warning; do
  [[ $(grep -cF "(each warning once per sweep): ${warning#warning: }" "$work/repeats.out") == 1 ]] ||
    fail "warning not repeated once in the job log: $warning"
  for run in $runs; do grep -qxF "$warning" "$sweep/$run/trident.log" && break; done
  grep -qF "warning from $run (each warning once per sweep): ${warning#warning: }" \
    "$work/repeats.out" || fail "the warning does not name $run, the first run with it: $warning"
done < <(cat "$sweep"/*/trident.log | grep '^warning: ' | sort -u)
grep -q "weak_scaling: 4 completed, 0 failed, 0 timed out" "$sweep/repeats.out" ||
  fail "the job log's copy in $sweep lacks the summary"
"$interpreter" - "$sweep" "$src" <<'PY' || fail "repeats: records and table"
import csv, json, sys
from pathlib import Path
sweep, src = Path(sys.argv[1]), sys.argv[2]
s = json.loads((sweep / "sweep.json").read_text())
assert s["repeats"] == 2 and s["launcher"] == "mpirun", s
p = s["provenance"]
keys = {"git_revision", "git_dirty", "trident_revision", "cpu_model", "cores_per_node", "host_simd",
        "blas", "blas_kernel", "kokkos_backend", "threads_per_rank", "mpi", "launcher",
        "slurm_job_id", "slurm_nodelist", "env"}
assert keys <= set(p), keys - set(p)
assert p["cpu_model"] and p["blas_kernel"] and p["cores_per_node"] >= 1, p
assert p["env"]["OMP_NUM_THREADS"] == str(s["threads_per_rank"]), p["env"]
assert isinstance(p["git_dirty"], bool) == bool(p["git_revision"]), p
for k in (1, 2):
    for dp in (1, 2):
        run = json.loads((sweep / f"n1_dp{dp}_tp1_pp1_rep{k}" / "run.json").read_text())
        assert (run["layout"], run["run"], run["repeat"], run["repeats"]) == \
            (f"n1_dp{dp}_tp1_pp1", f"n1_dp{dp}_tp1_pp1_rep{k}", k, 2), run
rows = list(csv.DictReader(open(sweep / "scaling.csv")))
assert sorted(int(r["ranks"]) for r in rows) == [1, 2], rows  # one row per layout
for r in rows:
    assert int(r["repeats"]) == 2, r
    assert float(r["step_s_min"]) <= float(r["median_step_s"]) <= float(r["step_s_max"]), r
PY

# The analysis interpreter. PYTHON without the modules (Debian's python3 without its site
# packages): the runs go ahead, the job says what is missing and how to install it, skips the
# analysis (showing the commands) and exits 1.
mkdir -p "$work/bare"
printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' >"$work/bare/python3"
chmod +x "$work/bare/python3"
run_job bare weak_scaling.sh STEPS=3 RANK_COUNTS=1 PYTHON="$work/bare/python3"
[[ $rc == 1 ]] || fail "a sweep without an analysis interpreter exited $rc, want 1"
expect_status n1_dp1_tp1_pp1 completed
grep -q "PYTHON=$work/bare/python3 ($work/bare/python3) cannot import h5py, numpy, pandas, matplotlib" \
  "$work/bare.out" || fail "the job does not say which modules PYTHON lacks"
grep -q "apt-get install python3-h5py python3-numpy python3-pandas python3-matplotlib" \
  "$work/bare.out" || fail "the job does not say how to install the modules"
grep -qxF "  $work/bare/python3 $src/analysis/scaling.py --warmup 2 $sweep" "$work/bare.out" ||
  fail "the skipped analysis command is not shown"
[[ ! -e $sweep/scaling.csv && -f $sweep/sweep.json ]] || fail "bare: analysis ran, or no sweep.json"
# That python3 first on PATH and PYTHON unset: the job takes /usr/bin/python3, which has them.
run_job path weak_scaling.sh -u PYTHON PATH="$work/bare:$PATH" STEPS=3 RANK_COUNTS=1
[[ $rc == 0 ]] || fail "weak_scaling with a bare python3 on PATH exited $rc"
grep -q "analysis interpreter: /usr/bin/python3$" "$work/path.out" || fail "did not take /usr/bin/python3"
# PYTHON that does not exist, REPEATS that is no count, REPEATS for convergence: refused, nothing
# written.
before=$(find "$work/runs" | wc -l)
for bad in "weak_scaling.sh|PYTHON=$work/none/python3|PYTHON=$work/none/python3 is not a program" \
  "weak_scaling.sh|REPEATS=two|REPEATS='two' must be a whole number from 1" \
  "convergence.sh|REPEATS=2|REPEATS=2: convergence.sh runs each variant once"; do
  IFS='|' read -r script setting message <<<"$bad"
  run_job refused "$script" "$setting"
  [[ $rc == 2 ]] || fail "$script $setting: exit $rc, want 2"
  grep -qF "$message" "$work/refused.out" || fail "$script $setting: no '$message'"
done
[[ $(find "$work/runs" | wc -l) == "$before" ]] || fail "a refused job wrote outputs"

# Layout sweep: trident refuses dp=4 for a batch of 2 and the sweep says why; pp > 1 once per
# schedule.
run_job layouts layout_sweep.sh STEPS=5 GLOBAL_BATCH=2 LAYOUTS="4x1x1 2x1x2 1x2x2 3x1x1" \
  SCHEDULES="gpipe 1f1b"
[[ $rc == 0 ]] || fail "layout_sweep exited $rc"
grep -q "skipping dp4_tp1_pp1: .*train.batch_size = 2 must be divisible by parallel.dp = 4" \
  "$work/layouts.out" || fail "layout_sweep did not give trident's reason for skipping 4x1x1"
grep -q "skipping '3x1x1'" "$work/layouts.out" || fail "layout_sweep ran 3x1x1 on 4 ranks"
[[ ! -d $sweep/dp4_tp1_pp1 ]] || fail "skipped layout has a run directory"
for run in dp2_tp1_pp2_gpipe dp2_tp1_pp2_1f1b dp1_tp2_pp2_gpipe dp1_tp2_pp2_1f1b; do
  expect_status "$run" completed
done
png "$sweep/bubble.png"
grep -q "gpipe" "$sweep/bubble.csv" || fail "bubble.csv has no gpipe row"

# ZeRO memory: stages 0 and 3 at dp 1 and 2 (dp 1 runs stage 0 only).
run_job zero zero_memory.sh STEPS=4 RANK_COUNTS="1 2" ZERO_STAGES="0 3"
[[ $rc == 0 ]] || fail "zero_memory exited $rc"
expect_status n1_dp1_zero0 completed
expect_status n1_dp2_zero0 completed
expect_status n1_dp2_zero3 completed
[[ ! -d $sweep/n1_dp1_zero3 ]] || fail "zero_memory ran stage 3 at dp 1"
png "$sweep/memory.png"

# Convergence: one run per variant, each variant's overrides applied, curves and final losses.
run_job convergence convergence.sh STEPS=6 RANKS=2 \
  VARIANTS="dp.sync=sync; dp.sync=local_sgd, dp.local_steps=2 ;precision.compute=bf16"
[[ $rc == 0 ]] || fail "convergence exited $rc"
for run in sync local_sgd_2 bf16; do expect_status "$run" completed; done
png "$sweep/convergence.png"
"${PYTHON:-/usr/bin/python3}" - "$sweep" <<'PY'
import csv, sys, tomllib
from pathlib import Path
import h5py
sweep = Path(sys.argv[1])
want = {"sync": ("sync", 4, "fp32"), "local_sgd_2": ("local_sgd", 2, "fp32"),
        "bf16": ("sync", 4, "bf16")}
for name, (sync, local_steps, compute) in want.items():
    with h5py.File(sweep / name / "timings.h5", "r") as f:
        c = tomllib.loads(f.attrs["config"])
        losses = f["loss"][:]
    assert (c["dp"]["sync"], c["dp"]["local_steps"], c["precision"]["compute"]) == \
        (sync, local_steps, compute), (name, c["dp"], c["precision"])
    assert c["parallel"]["dp"] == 2 and c["train"]["batch_size"] == 16, c["parallel"]
rows = {r["run"]: r for r in csv.DictReader(open(sweep / "convergence.csv"))}
assert sorted(rows) == sorted(want), rows
assert "dp.sync=local_sgd" in rows["local_sgd_2"]["label"], rows["local_sgd_2"]["label"]
assert "precision.compute=bf16" in rows["bf16"]["label"], rows["bf16"]["label"]
PY

# SETS reaches every run: bf16 compute, recorded in each run's resolved config.
run_job sets weak_scaling.sh STEPS=3 RANK_COUNTS="1 2" SETS="precision.compute=bf16 dp.sync=async"
[[ $rc == 0 ]] || fail "weak_scaling with SETS exited $rc"
for run in n1_dp1_tp1_pp1 n1_dp2_tp1_pp1; do
  expect_status "$run" completed
  "${PYTHON:-/usr/bin/python3}" -c '
import sys, tomllib, h5py
c = tomllib.loads(h5py.File(sys.argv[1], "r").attrs["config"])
assert (c["precision"]["compute"], c["dp"]["sync"]) == ("bf16", "async"), c' \
    "$sweep/$run/timings.h5" || fail "$run: SETS not applied"
done

# A run trident rejects is `failed`, the job exits 1 and skips the analysis.
run_job failed weak_scaling.sh STEPS=3 RANK_COUNTS="1 2" SETS="precision.compute=fp8"
[[ $rc == 1 ]] || fail "a sweep of failed runs exited $rc, want 1"
expect_status n1_dp1_tp1_pp1 failed
expect_status n1_dp2_tp1_pp1 failed
grep -q '"reason": "exit code 2; see trident.log"' "$sweep/n1_dp1_tp1_pp1/run.json" ||
  fail "run.json does not give the exit code"
grep -q "precision.compute" "$sweep/n1_dp1_tp1_pp1/trident.log" || fail "trident.log lacks the error"
grep -q "no completed run: skipping analysis/scaling.py" "$work/failed.out" ||
  fail "analysis ran without a completed run"

# RUN_TIMEOUT stops a run and marks it `timeout`.
run_job timeout weak_scaling.sh STEPS=1000000 RANK_COUNTS="2" RUN_TIMEOUT=3
[[ $rc == 1 ]] || fail "a timed-out sweep exited $rc, want 1"
expect_status n1_dp2_tp1_pp1 timeout
grep -q '"reason": "RUN_TIMEOUT=3 s"' "$sweep/n1_dp2_tp1_pp1/run.json" || fail "timeout reason"

# The time-limit warning (USR1, sent by Slurm from --signal=B:USR1@120): the running layout is a
# timeout, the rest do not start, and the job still ends by itself.
start_weak_scaling "$work/usr1.out" RANK_COUNTS="1 2"
signal_when_logged "$sweep/n1_dp1_tp1_pp1/trident.log" "step" "$job_pid" "$work/usr1.out"
[[ $rc == 1 ]] || fail "the USR1-stopped sweep exited $rc, want 1"
expect_status n1_dp1_tp1_pp1 timeout
[[ ! -d $sweep/n1_dp2_tp1_pp1 ]] || fail "a layout started after the time-limit warning"
grep -q "n1_dp2_tp1_pp1: not started" "$work/usr1.out" || fail "the skipped layout is not reported"

# SIGTERM to a layout's mpirun, not to the job (a scheduler signalling the step): the ranks stop
# and exit 4, mpirun exits 1, and the layout is still a timeout, not a failure.
start_weak_scaling "$work/term.out" RANK_COUNTS="2"
wait_for_line "$sweep/n1_dp2_tp1_pp1/trident.log" "^step"
pkill -TERM -f "^mpirun .*run.out_dir=$sweep( |$)" || fail "no mpirun to signal"
rc=0
wait "$job_pid" || rc=$?
cat "$work/term.out"
expect_status n1_dp2_tp1_pp1 timeout
grep -q '"exit_code": 4, .*"reason": "stopped early on a signal or run.max_minutes; see trident.log"' \
  "$sweep/n1_dp2_tp1_pp1/run.json" || fail "SIGTERM to mpirun: $(cat "$sweep/n1_dp2_tp1_pp1/run.json")"

# jobs/train.sh: one run, stopped on the time-limit signal (exit 4, a checkpoint), started again
# to the end, and once more: already complete.
train_env=(LAUNCHER=mpirun RANKS=2 STEPS=400 RUN_NAME=long SETS="run.log_every=10 run.eval_every=0")
run_dir=$work/runs/train/long
env "${train_env[@]}" bash jobs/train.sh >"$work/train1.out" 2>&1 &
job_pid=$!
signal_when_logged "$run_dir/trident.log" "^step   100/" "$job_pid" "$work/train1.out"
[[ $rc == 4 ]] || fail "train.sh stopped by USR1 exited $rc, want 4"
grep -q "train: stopped early with a checkpoint; run the script again to continue" "$work/train1.out" ||
  fail "train.sh: no stop line"
rc=0
env "${train_env[@]}" bash jobs/train.sh >"$work/train2.out" 2>&1 || rc=$?
cat "$work/train2.out"
[[ $rc == 0 && $(cat "$run_dir/status") == completed ]] || fail "train.sh again: exit $rc"
grep -q "^  resumed from $run_dir/checkpoints/step_.*.h5 at step" "$work/train2.out" ||
  fail "train.sh again: did not resume"
env "${train_env[@]}" bash jobs/train.sh >"$work/train3.out" 2>&1 || fail "train.sh a third time"
grep -q "^  run $run_dir is already complete at step 400" "$work/train3.out" ||
  { cat "$work/train3.out"; fail "train.sh a third time: not 'already complete'"; }
[[ -f $run_dir/timings.2.h5 && ! -e $run_dir/timings.3.h5 ]] || fail "train.sh: segments $(ls "$run_dir")"

# Job parameters are numbers and names before any arithmetic or path is built from them: each
# refused with exit 2 naming it, nothing run, no command inside a value executed, no glob.
refused_param() {  # SCRIPT PATTERN ENV=VALUE...
  local script=$1 pattern=$2
  shift 2
  rc=0
  env "$@" LAUNCHER=mpirun bash "jobs/$script" >"$work/param.out" 2>&1 || rc=$?
  [[ $rc == 2 ]] && grep -qF -- "$pattern" "$work/param.out" ||
    { cat "$work/param.out"; fail "$script $*: exit $rc, or no '$pattern'"; }
}
refused_param weak_scaling.sh "RANKS_PER_NODE='a[\$(touch $work/pwned)]' must be a whole number" \
  "RANKS_PER_NODE=a[\$(touch $work/pwned)]"
[[ ! -e $work/pwned ]] || fail "a command inside RANKS_PER_NODE ran"
refused_param strong_scaling.sh "RANK_COUNTS='0': 0 is not a whole number from 1" RANK_COUNTS=0
refused_param zero_memory.sh "RANK_COUNTS='*' must be whole numbers" "RANK_COUNTS=*"
refused_param layout_sweep.sh "STEPS='1e3' must be a whole number" STEPS=1e3
refused_param train.sh "RUN_NAME='../..' must be one path component" "${train_env[@]}" RUN_NAME=../..
mkdir -p "$work/one" "$work/two"
for d in one two; do
  sed "s|^from = \"models/|from = \"$src/inputs/models/|" inputs/tiny.toml > "$work/$d/tiny.toml"
done
refused_param weak_scaling.sh "two runs of this study would share the directory n1_dp1_tp1_pp1_tiny" \
  "CONFIGS=$work/one/tiny.toml $work/two/tiny.toml" DP=1 BATCH_PER_REPLICA=8
refused_param convergence.sh "two runs of this study would share the directory sync" \
  "VARIANTS=dp.sync=sync; dp.sync=sync" RANKS=1
echo PASS
