#!/usr/bin/env bash
# No path ends a command with an uncaught exception or an abort: each below exits 2 with one
# "trident: error:" line naming the path and the real cause, on every rank of a 2-rank run (no
# rank left waiting), and writes nothing it should not.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
# expect NAME PATTERN COMMAND...: exit status 2 within 60 s, the pattern on a "trident: error:"
# line, and no sign of an abort or an uncaught exception.
expect() {
  local name=$1 pattern=$2
  shift 2
  timeout 60 "$@" > "$work/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || { cat "$work/$name.log"; fail "$name: exit status $rc, expected 2"; }
  grep -q "^trident: error: .*$pattern" "$work/$name.log" ||
    { cat "$work/$name.log"; fail "$name: no error line matching '$pattern'"; }
  ! grep -Eq "terminate called|Aborted|core dumped|filesystem_error|MPI_ABORT" "$work/$name.log" ||
    { cat "$work/$name.log"; fail "$name: aborted"; }
  echo "$name: $(grep -m1 '^trident: error:' "$work/$name.log")"
}
train2=(mpirun -np 2 --oversubscribe "$trident" train --config inputs/tiny.toml --set run.steps=2
        --set parallel.dp=2)

touch "$work/file"
expect out_dir_is_file "cannot create the run directory '$work/file/tiny': Not a directory (a component of the path is a file)" \
  "${train2[@]}" --set run.out_dir="$work/file"
mkdir -p "$work/taken" && touch "$work/taken/tiny"
expect run_dir_is_file "cannot create the run directory '$work/taken/tiny': it is a file, not a directory" \
  "${train2[@]}" --set run.out_dir="$work/taken"
mkdir -p "$work/ck/tiny" && touch "$work/ck/tiny/checkpoints"
expect checkpoints_is_file "cannot create the checkpoint directory '$work/ck/tiny/checkpoints': it is a file" \
  "${train2[@]}" --set run.out_dir="$work/ck"
long=$work/$(printf 'd%.0s' $(seq 300))
expect long_out_dir "File name too long (shorten run.name or the path)" "${train2[@]}" --set run.out_dir="$long"
# A directory this user may not write to (the suite runs as root, which may write anywhere: run
# that case as nobody).
mkdir -p "$work/readonly" && chmod 555 "$work/readonly"
if [ "$(id -u)" -eq 0 ]; then as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups); else as_user=(); fi
chmod 755 "$work"
expect read_only_dir "cannot create the run directory '$work/readonly/tiny': Permission denied (this user may not write there)" \
  "${as_user[@]}" "$trident" train --config inputs/tiny.toml --set run.out_dir="$work/readonly"
[ -z "$(ls "$work/readonly")" ] || fail "something was written into the read-only directory"

# Inputs that are directories, outputs that are files or the inputs themselves.
expect data_is_dir "data file '$work' is a directory, not a file" "${train2[@]}" --set data.train="$work"
expect resume_is_dir "checkpoint '$work' is a directory, not a file" "${train2[@]}" --set run.out_dir="$work/r" --resume "$work"
head -c 4096 /dev/urandom | base64 > "$work/text.txt"
expect prepare_text_dir "--text '$work' is a directory; give a text file" \
  "$trident" prepare --text "$work" --out-dir "$work/data"
expect prepare_out_file "cannot create the --out-dir '$work/file': it is a file, not a directory" \
  "$trident" prepare --text "$work/text.txt" --out-dir "$work/file"
expect prepare_missing "text file '$work/missing.txt' cannot be opened" \
  "$trident" prepare --text "$work/missing.txt" --out-dir "$work/data"
"$trident" prepare --text "$work/text.txt" --out-dir "$work/data" --name c > /dev/null 2>&1 ||
  fail "prepare"
cp "$work/data/c_train.bin" "$work/data/keep.bin"
expect prepare_onto_input "cannot write '$work/data/c_train.bin': it is the input '$work/data/c_train.bin'" \
  "$trident" prepare --text "$work/data/c_train.bin" --out-dir "$work/data" --name c
cmp -s "$work/data/c_train.bin" "$work/data/keep.bin" || fail "prepare overwrote its input"
expect config_is_dir "config file '$work' is a directory, not a file" "$trident" train --config "$work"
"${train2[@]}" --set run.out_dir="$work/good" --set run.checkpoint_every=0 > /dev/null 2>&1 ||
  fail "a good run"
ck=$work/good/tiny/checkpoints/step_000002.h5
expect export_to_dir "cannot write '$work': it is a directory" \
  "$trident" ckpt export "$ck" --llmc "$work"
expect export_to_missing_dir "cannot write '$work/none/m.bin': its directory '$work/none' does not exist" \
  "$trident" ckpt export "$ck" --llmc "$work/none/m.bin"
expect ckpt_info_dir "checkpoint '$work' is a directory, not a file" "$trident" ckpt info "$work"
expect generate_dir "checkpoint '$work' is a directory, not a file" "$trident" generate --ckpt "$work"
# Inputs that are not what they claim: a FIFO where config.json is expected (once a hang), a
# directory as model.from (once a default model trained), JSON nested 100,000 deep, and an empty
# output path (once nothing written, exit 0).
mkdir -p "$work/fifo_hf" && mkfifo "$work/fifo_hf/config.json"
expect hf_config_fifo "'$work/fifo_hf/config.json' is not a regular file" \
  "$trident" ckpt import --hf "$work/fifo_hf" --out "$work/fifo.h5"
printf '[model]\nfrom = "%s"\n' "$work" > "$work/from_dir.toml"
expect model_from_dir "(model.from): model file '$work' is a directory, not a file" \
  "$trident" config --config "$work/from_dir.toml"
mkdir -p "$work/deep_hf"
/usr/bin/python3 -c 'import sys; n = 100000
sys.stdout.write("{\"model_type\": \"gpt2\", \"x\": " + "{\"a\":" * n + "1" + "}" * n + "}")' \
  > "$work/deep_hf/config.json"
expect deep_json "'$work/deep_hf/config.json': JSON nested deeper than 64 levels" \
  "$trident" ckpt import --hf "$work/deep_hf" --out "$work/deep.h5"
# TOML nested 100,000 deep: toml++'s own cap of 256 levels refuses it with its line and column.
/usr/bin/python3 -c 'n = 100000
print("[model]\nfrom = \"models/tiny.toml\"\n[run]\nname = " + "[" * n + "]" * n)' > "$work/deep.toml"
expect deep_toml "deep.toml:4:[0-9]*: TOML syntax error: .*exceeded maximum nested value depth" \
  "$trident" config --config "$work/deep.toml"
"$trident" ckpt export "$ck" --hf "" > "$work/empty_hf.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- '--hf: names no path' "$work/empty_hf.log" ||
  { cat "$work/empty_hf.log"; fail "export --hf '': exit status $rc"; }
# A FIFO where the shards' index is expected (once a hang), and an import into a missing directory.
"$trident" ckpt export "$ck" --hf "$work/exported" > /dev/null 2>&1 || fail "export --hf"
mkdir -p "$work/fifo_index" && cp "$work/exported/config.json" "$work/fifo_index/"
mkfifo "$work/fifo_index/model.safetensors.index.json"
expect hf_index_fifo "'$work/fifo_index/model.safetensors.index.json' is not a regular file" \
  "$trident" ckpt import --hf "$work/fifo_index" --out "$work/fifo.h5"
expect import_to_missing_dir "cannot write '$work/none/x.h5': its directory '$work/none' does not exist" \
  "$trident" ckpt import --hf "$work/exported" --out "$work/none/x.h5"
[ ! -e "$work/fifo.h5" ] && [ ! -e "$work/deep.h5" ] || fail "a refused import wrote its output"
echo "bad paths: ok"
