#!/usr/bin/env bash
# The run directory is owned (2 ranks, dp 2):
#  - a second run on a directory in use exits 2 naming the holder's pid, fresh or --resume auto;
#  - a lock left by a dead process on this host (or one whose pid another program now has), by an
#    earlier start of this requeued Slurm job, or by another host's run that stopped refreshing
#    it, is taken over with a line; one held by a live process, or freshly refreshed, is not;
#  - a fresh run into a directory holding a finished run exits 2 leaving its files untouched, and
#    --overwrite replaces them;
#  - two runs sharing offload.nvme_dir under one run.name: the second exits 2 naming the holder;
#  - a killed 2-rank run's rank-1 offload files are removed by its resume on 1 rank;
#  - a lock that is a dangling symbolic link or a directory is refused at once, named;
#  - run.name and prepare --name are single path components.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
common=(--config inputs/tiny.toml --set run.eval_every=0 --set parallel.dp=2)
fail() { echo "FAIL: $*"; exit 1; }
run2() { mpirun -np 2 --oversubscribe "$trident" train "${common[@]}" "$@"; }
wait_for_step() {  # log: until the run has made a step
  for _ in $(seq 600); do
    grep -q "^step " "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no step in $1"
}

# A long run holds runs/tiny; a second one on it is refused, naming the holder.
run2 --set run.steps=100000 --set run.log_every=1 --set run.checkpoint_every=0 \
  --set run.out_dir="$work/busy" > "$work/holder.log" 2>&1 &
holder=$!
wait_for_step "$work/holder.log"
lock=$work/busy/tiny/run.lock
[ -f "$lock" ] || fail "no lock file while the run is going"
holder_pid=$(grep -o 'pid=[0-9]*' "$lock" | cut -d= -f2)
for extra in "" "--resume auto"; do
  run2 --set run.steps=10 --set run.out_dir="$work/busy" $extra > "$work/second.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "a second run ($extra): exit status $rc, expected 2"
  grep -q "trident: error: run directory $work/busy/tiny is in use by another run (pid $holder_pid on host" \
    "$work/second.log" || { cat "$work/second.log"; fail "the holder is not named"; }
done
kill -USR1 "$(pgrep -f -- "run.out_dir=$work/busy( |$)" | sort -n | sed -n 2p)"
wait $holder
[ $? -eq 4 ] || fail "the holder did not stop on SIGUSR1"
[ ! -e "$lock" ] || fail "the lock outlived its run"

# Stale and live locks.
host=$(hostname)
sleep 300 &
alive=$!
bash -c 'exit 0' &
dead=$!
wait $dead
try_lock() {  # holder-record [touch-date]: a 2-step run on a directory holding that lock
  rm -rf "$work/locks" && mkdir -p "$work/locks/tiny"
  echo "$1" > "$work/locks/tiny/run.lock"
  [ -n "${2-}" ] && touch -d "$2" "$work/locks/tiny/run.lock"
  run2 --set run.steps=2 --set run.out_dir="$work/locks" > "$work/lock.log" 2>&1
}
try_lock "host=$host pid=$dead slurm_job= slurm_restart= started=2026-01-01T00:00:00Z" ||
  fail "a dead process's lock was not taken over"
grep -q "taking over the lock of run directory $work/locks/tiny from pid $dead on host .*: its process is gone" \
  "$work/lock.log" || fail "no take-over line for a dead process"
try_lock "host=$host pid=$alive slurm_job= slurm_restart= started=2026-01-01T00:00:00Z" &&
  fail "a live process's lock was taken over"
grep -q "is in use by another run (pid $alive on host" "$work/lock.log" || fail "live holder not named"
try_lock "host=$host pid=$alive comm=trident slurm_job= slurm_restart= started=2026-01-01T00:00:00Z" ||
  fail "a lock whose pid was reused by another program was not taken over"
grep -q "from pid $alive on host .*: its pid now belongs to 'sleep'" "$work/lock.log" ||
  fail "no take-over line for a reused pid"
try_lock "host=elsewhere pid=1 slurm_job=77 slurm_restart= started=2026-01-01T00:00:00Z" &&
  fail "a freshly refreshed lock of another host was taken over"
grep -q "(pid 1 on host elsewhere, Slurm job 77, started 2026-01-01T00:00:00Z; lock file" "$work/lock.log" ||
  fail "other host's holder not named"
try_lock "host=elsewhere pid=1 slurm_job=77 slurm_restart= started=2026-01-01T00:00:00Z" "20 minutes ago" ||
  fail "a lock not refreshed for 20 minutes was not taken over"
grep -q "it was last refreshed 1[0-9]* s ago" "$work/lock.log" || fail "no stale-heartbeat line"
SLURM_JOB_ID=88 SLURM_RESTART_COUNT=1 try_lock \
  "host=elsewhere pid=1 slurm_job=88 slurm_restart= started=2026-01-01T00:00:00Z" ||
  fail "a requeued job did not take over its earlier incarnation's lock"
grep -q "it is an earlier run of this requeued Slurm job" "$work/lock.log" || fail "no requeue line"
kill $alive

# A lock that is a dangling symbolic link (O_EXCL says it exists, stat says it does not) or a
# directory: a clear error at once, not a hang or "in use by pid ?".
for kind in symlink directory; do
  rm -rf "$work/locks" && mkdir -p "$work/locks/tiny"
  if [ $kind = symlink ]; then ln -s "$work/nowhere" "$work/locks/tiny/run.lock"
  else mkdir "$work/locks/tiny/run.lock"; fi
  timeout 60 "$trident" train --config inputs/tiny.toml --set run.steps=2 \
    --set run.out_dir="$work/locks" > "$work/lock.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { cat "$work/lock.log"; fail "a $kind as run.lock: exit status $rc, expected 2"; }
  what=$([ $kind = symlink ] && echo "a symbolic link" || echo "a directory")
  grep -q "trident: error: the lock file '$work/locks/tiny/run.lock' of run directory $work/locks/tiny is $what, not a lock trident wrote" \
    "$work/lock.log" || { cat "$work/lock.log"; fail "a $kind as run.lock: message"; }
done

# A fresh run into a finished run's directory.
run2 --set run.steps=4 --set run.checkpoint_every=2 --set run.out_dir="$work/done" \
  > "$work/done.log" 2>&1 || fail "first run"
before=$(cd "$work/done/tiny" && md5sum timings.h5 checkpoints/*)
run2 --set run.steps=4 --set run.out_dir="$work/done" > "$work/again.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "a fresh run into a finished run: exit status $rc"
grep -q "trident: error: run directory $work/done/tiny holds an earlier run (3 files: timings, checkpoints); continue it with --resume auto, choose another run.name, or pass --overwrite" \
  "$work/again.log" || { cat "$work/again.log"; fail "message"; }
[ "$before" = "$(cd "$work/done/tiny" && md5sum timings.h5 checkpoints/*)" ] ||
  fail "the refused run changed the earlier run's files"
run2 --set run.steps=3 --set run.checkpoint_every=0 --set run.out_dir="$work/done" --overwrite \
  > "$work/overwrite.log" 2>&1 || fail "--overwrite"
grep -q "^--overwrite: deleted the earlier run's 3 files in $work/done/tiny" "$work/overwrite.log" ||
  fail "--overwrite line"
[ "$(ls "$work/done/tiny/checkpoints")" = step_000003.h5 ] || fail "--overwrite left $(ls "$work/done/tiny/checkpoints")"

# NVMe offload files shared by two runs of one name in different run directories.
mkdir -p "$work/nvme"
nvme=(--set offload.optimizer=nvme --set offload.nvme_dir="$work/nvme")
run2 --set run.steps=100000 --set run.log_every=1 --set run.checkpoint_every=-1 \
  --set run.out_dir="$work/n1" "${nvme[@]}" > "$work/n1.log" 2>&1 &
first=$!
wait_for_step "$work/n1.log"
run2 --set run.steps=2 --set run.out_dir="$work/n2" "${nvme[@]}" > "$work/n2.log" 2>&1
rc=$?
kill -USR1 "$(pgrep -f -- "run.out_dir=$work/n1( |$)" | sort -n | sed -n 2p)"
wait $first
[ $rc -eq 2 ] || fail "a second run on the same NVMe offload files: exit status $rc"
grep -q "trident: error: the NVMe offload prefix $work/nvme/tiny.rank0 is in use by another run (pid" \
  "$work/n2.log" || { cat "$work/n2.log"; fail "NVMe offload: message"; }

# A run on 2 ranks killed with SIGKILL leaves rank 1's NVMe offload files; resumed on 1 rank, the
# run removes them (their lock's holder is gone) and says so.
mkdir -p "$work/nvme_dead"
dead_nvme=(--set offload.optimizer=nvme --set offload.nvme_dir="$work/nvme_dead")
run2 --set run.steps=400 --set run.log_every=1 --set run.checkpoint_every=5 \
  --set run.out_dir="$work/dead" "${dead_nvme[@]}" > "$work/dead.log" 2>&1 &
killed=$!
for _ in $(seq 600); do
  grep -q "^step    12/" "$work/dead.log" 2>/dev/null && break
  sleep 0.1
done
pkill -KILL -f -- "run.out_dir=$work/dead( |$)"
wait $killed
ls "$work/nvme_dead"/tiny.rank1.* > /dev/null 2>&1 || fail "the killed run left no rank-1 offload files"
"$trident" train "${common[@]}" --set parallel.dp=1 --set run.steps=400 --set run.checkpoint_every=0 \
  --set run.out_dir="$work/dead" "${dead_nvme[@]}" --resume auto > "$work/dead_resumed.log" 2>&1 ||
  { tail -5 "$work/dead_resumed.log"; fail "resume on 1 rank after the kill"; }
grep -q "^removed [0-9.]* MiB of NVMe offload files $work/nvme_dead/tiny.rank1.\* of rank 1, left by an earlier run on more ranks" \
  "$work/dead_resumed.log" || { cat "$work/dead_resumed.log"; fail "no line for the removed offload files"; }
[ -z "$(ls "$work/nvme_dead")" ] || fail "offload files left: $(ls "$work/nvme_dead")"

# Names are single path components.
for name in .. . "a/b" "$(printf 'x%.0s' $(seq 300))"; do
  "$trident" train --config inputs/tiny.toml --set run.out_dir="$work/names" --set "run.name=$name" \
    > "$work/name.log" 2>&1
  [ $? -eq 2 ] || fail "run.name=${name:0:20}: not refused"
  grep -q "trident: error: .*run.name = '.*' .*: it must be one directory name inside run.out_dir" \
    "$work/name.log" || { cat "$work/name.log"; fail "run.name=${name:0:20}: message"; }
done
[ ! -e "$work/tiny" ] && [ ! -e "$work/names" ] || fail "a refused run.name wrote something"
head -c 4096 /dev/urandom | base64 > "$work/text.txt"
"$trident" prepare --text "$work/text.txt" --out-dir "$work/data" --name ../x > "$work/prep.log" 2>&1
[ $? -eq 2 ] || fail "prepare --name ../x: not refused"
grep -q "trident: error: --name '../x' holds a '/'" "$work/prep.log" || fail "prepare --name: message"
[ ! -e "$work/x_train.bin" ] || fail "prepare --name ../x wrote outside --out-dir"
echo "run ownership: ok"
