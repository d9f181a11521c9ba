#!/usr/bin/env bash
# Every file trident writes lands where it was asked and nowhere else (core/output_file.hpp): a
# link planted at an output is replaced, never written through; an output that is an input of the
# same command is refused (exit 2) with the input unchanged; an export into the directory of an
# earlier one leaves no index or shard of it behind; a refused export keeps the file that was
# there.
# shellcheck source=tests/e2e/hf_common.sh
source "$(dirname "$0")/hf_common.sh" "$@"
files="/usr/bin/python3 $src/tests/e2e/hf_files.py"
victim=$work/victim
echo precious > "$victim"
untouched() { [ "$(cat "$victim")" = precious ] || fail "$1: the linked file was written"; }
# refused NAME PATTERN COMMAND...: exit 2 with the pattern on the error line.
refused() {
  local name=$1 pattern=$2
  shift 2
  "$@" > "$work/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || { cat "$work/$name.log"; fail "$name: exit status $rc, expected 2"; }
  grep -q "^trident: error: .*$pattern" "$work/$name.log" ||
    { cat "$work/$name.log"; fail "$name: no error line matching '$pattern'"; }
}
train=("$trident" train --config inputs/tiny.toml --set run.steps=2 --set run.eval_every=0
       --set run.checkpoint_every=2)

# Gradient dumps: through a link at the name (replaced), onto the training data (refused).
ln -s "$victim" "$work/grads.h5"
"${train[@]}" --set run.out_dir="$work/run" --dump-grads "$work/grads.h5" > "$work/run.log" 2>&1 ||
  { cat "$work/run.log"; fail "a run dumping gradients"; }
untouched "--dump-grads onto a link"
[ -f "$work/grads.h5" ] && [ ! -L "$work/grads.h5" ] || fail "--dump-grads: no file at the link's name"
cp data/kjv_val.bin "$work/val.bin"
refused dump_onto_data "cannot write '$work/val.bin': it is the input '$work/val.bin'" \
  "${train[@]}" --set run.out_dir="$work/run2" --set data.val="$work/val.bin" \
  --dump-grads "$work/val.bin"
cmp -s data/kjv_val.bin "$work/val.bin" || fail "--dump-grads replaced the data"
ck=$work/run/tiny/checkpoints/step_000002.h5
[ -f "$ck" ] || fail "no checkpoint"
# ... onto the config file the run reads, or the checkpoint it resumes from (refused, kept).
mkdir -p "$work/models" && cp inputs/models/tiny.toml "$work/models/"  # its model.from
cp inputs/tiny.toml "$work/tiny.toml" && cp "$work/tiny.toml" "$work/tiny.kept"
refused dump_onto_config "cannot write '$work/tiny.toml': it is the input '$work/tiny.toml'" \
  "$trident" train --config "$work/tiny.toml" --set run.steps=2 --set run.out_dir="$work/run3" \
  --dump-grads "$work/tiny.toml"
cmp -s "$work/tiny.toml" "$work/tiny.kept" || fail "--dump-grads replaced the config"
"${train[@]}" --set run.steps=4 --set run.out_dir="$work/four" > /dev/null 2>&1 || fail "4 steps"
cp "$work/four/tiny/checkpoints/step_000002.h5" "$work/resumed.h5"
cp "$work/resumed.h5" "$work/resumed.kept"
refused dump_onto_resumed "cannot write '$work/resumed.h5': it is the input '$work/resumed.h5'" \
  "${train[@]}" --set run.steps=4 --set run.out_dir="$work/run4" --resume "$work/resumed.h5" \
  --dump-grads "$work/resumed.h5"
cmp -s "$work/resumed.h5" "$work/resumed.kept" || fail "--dump-grads replaced the resumed checkpoint"

# The run directory's stop marker: a link planted at it is replaced when a time budget stops the
# run.
mkdir -p "$work/stop/tiny" && ln -s "$victim" "$work/stop/tiny/stopped"
"${train[@]}" --set run.steps=50 --set run.max_minutes=0.001 --set run.out_dir="$work/stop" \
  > "$work/stop.log" 2>&1
grep -q "^stopping after step" "$work/stop.log" || { cat "$work/stop.log"; fail "no stop"; }
untouched "the stop marker onto a link"
[ -f "$work/stop/tiny/stopped" ] && [ ! -L "$work/stop/tiny/stopped" ] || fail "no stop marker"

# prepare: a link at an output's name is replaced.
head -c 5000 data/kjv_train.bin | od -An -c > "$work/text.txt"
mkdir -p "$work/data" && ln -s "$victim" "$work/data/c_train.bin"
"$trident" prepare --text "$work/text.txt" --out-dir "$work/data" --name c > /dev/null 2>&1 ||
  fail "prepare"
untouched "prepare onto a link"
[ ! -L "$work/data/c_train.bin" ] || fail "prepare left the link"

# Exports: links at config.json, model.safetensors and the index replaced; a sharded export then
# a single-file one into the same directory leaves only the single file's export, which imports as
# the checkpoint.
mkdir -p "$work/hf" && ln -s "$victim" "$work/hf/config.json"
"$trident" ckpt export "$ck" --hf "$work/hf" --max-shard-mb 0.05 > /dev/null || fail "sharded export"
untouched "export onto a link"
ls "$work/hf"/model-*-of-*.safetensors > /dev/null 2>&1 && [ -f "$work/hf/model.safetensors.index.json" ] ||
  fail "the first export is not sharded"
rm "$work/hf/model.safetensors.index.json" && ln -s "$victim" "$work/hf/model.safetensors.index.json"
ln -s "$victim" "$work/hf/model.safetensors"
"$trident" ckpt export "$ck" --hf "$work/hf" > /dev/null || fail "single-file export"
untouched "export onto links at model.safetensors and the index"
left=$(ls "$work/hf" | tr '\n' ' ')
[ "$left" = "config.json model.safetensors " ] || fail "the directory after a second export: $left"
"$trident" ckpt import --hf "$work/hf" --out "$work/back.h5" > /dev/null || fail "import"
"$trident" ckpt export "$work/back.h5" --hf "$work/hf2" > /dev/null || fail "export of the import"
cmp -s "$work/hf/model.safetensors" "$work/hf2/model.safetensors" || fail "the export reads back as another model"

# A directory holding a single file and an index of other shards (two exports mixed) is refused.
"$trident" ckpt export "$ck" --hf "$work/mixed" --max-shard-mb 0.05 > /dev/null || fail "sharded export"
cp "$work/hf/model.safetensors" "$work/mixed/"
refused mixed_exports "holds model.safetensors and an index of other files" \
  "$trident" ckpt import --hf "$work/mixed" --out "$work/mixed.h5"

# An import through a link at --out replaces the link.
ln -s "$victim" "$work/imported.h5"
"$trident" ckpt import --hf "$work/hf" --out "$work/imported.h5" > /dev/null || fail "import onto a link"
untouched "import onto a link"
[ -f "$work/imported.h5" ] && [ ! -L "$work/imported.h5" ] || fail "import: no file at the link's name"

# An import onto a file it reads is refused, the file kept.
cp "$work/hf/model.safetensors" "$work/kept.safetensors"
refused import_onto_input "it is the input '$work/hf/model.safetensors'" \
  "$trident" ckpt import --hf "$work/hf" --out "$work/hf/model.safetensors"
cmp -s "$work/hf/model.safetensors" "$work/kept.safetensors" || fail "import replaced its input"

# A refused llm.c export (a truncated checkpoint) keeps the file that was at --llmc.
echo earlier > "$work/model.bin"
head -c 4000 "$ck" > "$work/cut.h5"
"$trident" ckpt export "$work/cut.h5" --llmc "$work/model.bin" > "$work/cut.log" 2>&1 &&
  fail "an export of a truncated checkpoint succeeded"
[ "$(cat "$work/model.bin")" = earlier ] || fail "a refused llm.c export replaced the file there"
[ "$(ls -A "$work" | grep -c '\.tmp$')" = 0 ] || fail "temporaries left: $(ls -A "$work")"

# A run whose directory is removed while it trains ends with exit 2, naming it, and no PERFORMANCE
# line (its timings went to a file no name reaches).
"${train[@]}" --set run.steps=600 --set run.checkpoint_every=-1 --set run.log_every=100 \
  --set run.out_dir="$work/gone" > "$work/gone.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "^step" "$work/gone.log" && break; sleep 0.1; done
rm -rf "$work/gone/tiny"
wait $pid
rc=$?
[ $rc -eq 2 ] && grep -q "the run directory $work/gone/tiny was removed or replaced during the run" \
  "$work/gone.log" || { cat "$work/gone.log"; fail "a removed run directory: exit $rc"; }
! grep -q "^PERFORMANCE" "$work/gone.log" || fail "a removed run directory: a PERFORMANCE line"
echo "output files: links replaced, inputs kept, exports own their directory"
