#!/usr/bin/env bash
# Each bad input exits with status 2, prints a message naming the problem, and writes nothing.
set -uo pipefail
trident=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$src"
failures=0 cases=0
expect_bad() {  # description, expected message fragment, command...
  local what=$1 needle=$2; shift 2
  cases=$((cases + 1))
  rm -rf "$work/out"
  "$@" > "$work/stdout" 2> "$work/stderr"
  local rc=$?
  if [ $rc -ne 2 ]; then
    echo "FAIL [$what]: exit status $rc, expected 2"; cat "$work/stderr"; failures=$((failures + 1)); return
  fi
  if ! grep -qF -- "$needle" "$work/stderr"; then
    echo "FAIL [$what]: stderr lacks '$needle':"; cat "$work/stderr"; failures=$((failures + 1)); return
  fi
  if [ -e "$work/out" ]; then
    echo "FAIL [$what]: wrote $work/out"; failures=$((failures + 1)); return
  fi
  echo "ok   [$what]: $(head -n 1 "$work/stderr")"
}
train=("$trident" train --config inputs/tiny.toml --set run.out_dir="$work/out")
# The bound on what a reader may allocate: 4 GB of address space, or in an AddressSanitizer build
# (make build-sanitize; sanitize.bad_input), whose shadow memory cannot start under ulimit -v,
# ASan's own largest allocation (a larger one is an error, exit 1).
bound="ulimit -v 4000000" sanitized=0
if ldd "$trident" | grep libasan > /dev/null; then
  bound=true sanitized=1
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:exitcode=1}:max_allocation_size_mb=4096
fi

# A valid checkpoint of a different model, and some broken files.
"$trident" train --config inputs/tiny.toml --set run.steps=1 --set run.out_dir="$work/ok" > /dev/null
good_ckpt="$work/ok/tiny/checkpoints/step_000001.h5"
head -c 3000 "$good_ckpt" > "$work/truncated.h5"
head -c 5000 /dev/urandom > "$work/garbage.h5"
# One parameter changed inside an otherwise valid file (its stored checksum no longer matches),
# and a file cut after its metadata, inside the tensor data.
cp "$good_ckpt" "$work/corrupted.h5"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['params/h.1.mlp.fc.weight']
    d[3, 5] = d[3, 5] + 0.5
" "$work/corrupted.h5"
head -c $(( $(stat -c %s "$good_ckpt") * 3 / 4 )) "$good_ckpt" > "$work/cut.h5"
# A stored config within every range a config file has, for a model no machine here holds
# (L = 1024, C = 65536: 53 trillion parameters).
cp "$good_ckpt" "$work/huge_model.h5"
/usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    c = f.attrs['config']
    c = c.decode() if isinstance(c, bytes) else c
    for a, b in [('n_layer = 4', 'n_layer = 1024'), ('n_embd = 32', 'n_embd = 65536'),
                 ('n_head = 4', 'n_head = 64')]:
        assert a in c, a
        c = c.replace(a, b)
    del f.attrs['config']
    f.attrs['config'] = c
" "$work/huge_model.h5"
head -c 4000 /dev/urandom > "$work/garbage.bin"
head -c 1500 data/kjv_val.bin > "$work/short.bin"
{ head -c 8 data/kjv_val.bin; printf '\x0a\x00\x00\x00'; head -c 1012 /dev/zero; head -c 20 /dev/zero; } > "$work/few.bin"
printf '[run\nsteps = 3\n' > "$work/syntax.toml"
printf '[model]\nn_layer = 2\n[train]\nbatch_size = "eight"\n' > "$work/type.toml"
printf '[model]\nn_layer = 2\n[train]\nbatch_sizes = 4\n' > "$work/unknown.toml"

expect_bad "unknown key" "unknown key 'run.stepz'" "${train[@]}" --set run.stepz=3
expect_bad "unknown key in file" "unknown key 'train.batch_sizes'" "$trident" train --config "$work/unknown.toml" --set run.out_dir="$work/out"
expect_bad "wrong type in file" "'train.batch_size' must be an integer" "$trident" train --config "$work/type.toml" --set run.out_dir="$work/out"
expect_bad "wrong type in --set" "is not an integer" "${train[@]}" --set run.steps=ten
# A GPT-2 MoE (GELU experts) trains; llm.c's format cannot hold it, and the export says so.
"$trident" train --config inputs/gpt2moe-tiny.toml --set run.out_dir="$work/moe_gpt2" --set run.steps=1 \
  --set run.checkpoint_every=1 > "$work/moe_gpt2.log" 2>&1 || { echo "FAIL [GPT-2 MoE trains]"; cat "$work/moe_gpt2.log"; failures=$((failures + 1)); }
expect_bad "llm.c export of an MoE" "holds a Mixture-of-Experts GPT-2; llm.c's format holds dense GPT-2 only" "$trident" ckpt export "$work/moe_gpt2/gpt2moe-tiny/checkpoints/step_000001.h5" --llmc "$work/moe_gpt2.bin"
expect_bad "MoE over tp without SP" "Mixture of Experts with parallel.tp > 1 needs parallel.sequence_parallel = true" mpirun -np 2 --oversubscribe "$trident" train --config inputs/moe-tiny.toml --set run.out_dir="$work/out" --set parallel.tp=2
expect_bad "ep not dividing the experts" "parallel.ep = 3 must divide model.n_experts = 8" mpirun -np 3 --oversubscribe "$trident" train --config inputs/moe-tiny.toml --set run.out_dir="$work/out" --set parallel.ep=3 --set train.batch_size=6
expect_bad "ep not dividing dp x tp" "parallel.ep = 4 must divide parallel.dp x tp = 2 x 1" mpirun -np 2 --oversubscribe "$trident" train --config inputs/moe-tiny.toml --set run.out_dir="$work/out" --set parallel.ep=4
expect_bad "ep on a dense model" "parallel.ep = 2 splits experts, but model.n_experts = 0" mpirun -np 2 --oversubscribe "$trident" train --config inputs/llama-tiny.toml --set run.out_dir="$work/out" --set parallel.ep=2
expect_bad "MoE top_k above the experts" "model.top_k = 5 must be between 1 and model.n_experts = 4" "$trident" plan --config inputs/tiny.toml --set model.n_experts=4 --set model.top_k=5
expect_bad "TOML syntax" "TOML syntax error" "$trident" train --config "$work/syntax.toml"
expect_bad "missing config" "does not exist" "$trident" train --config "$work/none.toml"
expect_bad "heads do not divide C" "model.n_head = 5 must divide model.n_embd = 32" "${train[@]}" --set model.n_head=5
expect_bad "T above block size" "train.seq_len = 64 must be between 1 and model.block_size = 32" "${train[@]}" --set train.seq_len=64
expect_bad "negative lr" "optim.lr" "${train[@]}" --set optim.lr=-0.1
expect_bad "zero batch" "train.batch_size" "${train[@]}" --set train.batch_size=0
expect_bad "dp mismatch" "must equal the number of MPI ranks 1" "${train[@]}" --set parallel.dp=3
expect_bad "tp not built" "parallel.tp" "${train[@]}" --set parallel.tp=2
expect_bad "nccl on a host build" "parallel.backend_tp = 'nccl' needs a CUDA build of Kokkos" "${train[@]}" --set parallel.backend_tp=nccl
expect_bad "unknown backend" "parallel.backend_dp = 'gloo' must be one of auto, mpi, nccl" "${train[@]}" --set parallel.backend_dp=gloo
expect_bad "zero stage out of range" "zero.stage = 5 must be 0, 1, 2 or 3" "${train[@]}" --set zero.stage=5
expect_bad "unknown offload" "offload.optimizer = 'disk' must be one of none, host, nvme" "${train[@]}" --set offload.optimizer=disk
expect_bad "missing nvme dir" "offload.nvme_dir = '/nonexistent/nvme' is not a directory" "${train[@]}" --set offload.optimizer=nvme --set offload.nvme_dir=/nonexistent/nvme
expect_bad "params offload without zero 3" "offload.params = 'nvme' needs zero.stage = 3" "${train[@]}" --set offload.params=nvme --set offload.optimizer=nvme
expect_bad "unknown params offload" "offload.params = 'host' must be none or nvme" "${train[@]}" --set offload.params=host
expect_bad "missing data file" "/nonexistent/train.bin" "${train[@]}" --set data.train=/nonexistent/train.bin
expect_bad "garbage data file" "has magic" "${train[@]}" --set data.train="$work/garbage.bin"
expect_bad "truncated data file" "truncated or corrupt" "${train[@]}" --set data.val="$work/short.bin"
expect_bad "data file shorter than a sequence" "data file '$work/few.bin' has 10 tokens, fewer than train.seq_len + 1 = 17" "${train[@]}" --set data.val="$work/few.bin"
expect_bad "token beyond vocab" "model.vocab_size = 100" "${train[@]}" --set model.vocab_size=100
expect_bad "resume missing" "does not exist" "${train[@]}" --resume "$work/none.h5"
expect_bad "resume garbage" "not a readable HDF5 file" "${train[@]}" --resume "$work/garbage.h5"
expect_bad "resume truncated" "truncated or corrupt" "${train[@]}" --resume "$work/truncated.h5"
expect_bad "resume corrupted tensor" "dataset 'params/h.1.mlp.fc.weight' fails its checksum" "${train[@]}" --set run.steps=1 --resume "$work/corrupted.h5"
expect_bad "export corrupted tensor" "dataset 'params/h.1.mlp.fc.weight' fails its checksum" "$trident" ckpt export "$work/corrupted.h5" --llmc "$work/corrupted_export.bin"
[ ! -e "$work/corrupted_export.bin" ] || { echo "FAIL [export corrupted tensor]: a partial export was left"; failures=$((failures + 1)); }
expect_bad "generate from a model too big to hold" "that needs" "$trident" generate --ckpt "$work/huge_model.h5" --tokens 5
grep -q "holds a model (model.n_layer = 1024, model.n_embd = 65536, model.block_size = 32) that needs [0-9.]* GiB to sample from by the memory model, more than the node's" "$work/stderr" ||
  { echo "FAIL [generate from a model too big to hold]: $(cat "$work/stderr")"; failures=$((failures + 1)); }
# verify and export check each dataset's shape before they allocate room for it: the huge stored
# model's tensors are refused, within a 4 GiB address space.
($bound && "$trident" ckpt verify "$work/huge_model.h5" > "$work/stdout" 2> "$work/stderr")
rc=$?
cases=$((cases + 1))
if [ $rc -ne 2 ] || ! grep -q "^FAIL params/h.0.attn.qkv.weight: .*has a different shape" "$work/stdout" ||
   grep -q "bad_alloc" "$work/stderr"; then
  echo "FAIL [verify a model too big to hold]: exit $rc"; tail -3 "$work/stdout" "$work/stderr"
  failures=$((failures + 1))
fi
expect_bad "export a model too big to hold" "params/wte" bash -c "$bound"' && exec "$@"' bound "$trident" ckpt export "$work/huge_model.h5" --llmc "$work/huge_export.bin"
expect_bad "resume cut in the data" "checkpoint '$work/cut.h5'" "${train[@]}" --resume "$work/cut.h5"
expect_bad "resume other model" "holds a different model" "${train[@]}" --set model.n_layer=3 --resume "$good_ckpt"
expect_bad "generate garbage" "not a readable HDF5 file" "$trident" generate --ckpt "$work/garbage.h5" --prompt hi
expect_bad "generate temperature" "--temperature 0 must be at least 1e-06" "$trident" generate --ckpt "$good_ckpt" --temperature 0
expect_bad "underflowing temperature" "--temperature 1e-39 must be at least 1e-06" "$trident" generate --ckpt "$good_ckpt" --temperature 1e-39
for key in optim.eps optim.max_norm optim.weight_decay model.rope_theta run.peak_tflops offload.buffer_mb parallel.dp_bucket_mb; do
  expect_bad "$key infinite" "key '$key' = inf must be a finite number" "${train[@]}" --set "$key=inf"
done
expect_bad "plan kv heads" "plan: --kv-heads = 3 must divide --heads = 4" "$trident" plan --layers 2 --hidden 64 --heads 4 --llama --kv-heads 3
expect_bad "plan negative ffn" "plan: --ffn = -5 must be between 0" "$trident" plan --layers 2 --hidden 64 --heads 4 --llama --ffn -5
expect_bad "huge ffn" "model.ffn_hidden = 1073741824 and model.multiple_of = 256 must be at most 1048576" "$trident" train --config inputs/llama-tiny.toml --set run.out_dir="$work/out" --set model.ffn_hidden=1073741824
expect_bad "huge dp bucket" "parallel.dp_bucket_mb = 1e+300 must be in (0, 65536]" "${train[@]}" --set parallel.dp_bucket_mb=1e300
expect_bad "recompute policy" "recompute.policy = 'most' must be one of none, selective, full" "${train[@]}" --set recompute.policy=most
expect_bad "recompute layers without full" "recompute.layers applies only to recompute.policy = 'full'" "${train[@]}" --set recompute.layers=1
expect_bad "recompute too many layers" "recompute.layers = 9 must be between 0" "${train[@]}" --set recompute.policy=full --set recompute.layers=9
expect_bad "lr scaling name" "optim.lr_scaling = 'cubic' must be one of none, linear, sqrt" "${train[@]}" --set optim.lr_scaling=cubic
expect_bad "lr scaling without base" "needs optim.base_batch_tokens > 0" "${train[@]}" --set optim.lr_scaling=linear
expect_bad "dp sync name" "dp.sync = 'eventually' must be one of sync, async, local_sgd" "${train[@]}" --set dp.sync=eventually
expect_bad "async with ZeRO-2" "dp.sync = 'async' needs zero.stage 0 or 1, not 2" "${train[@]}" --set dp.sync=async --set zero.stage=2
expect_bad "local_sgd with ZeRO-1" "dp.sync = 'local_sgd' needs zero.stage = 0, not 1" "${train[@]}" --set dp.sync=local_sgd --set zero.stage=1
expect_bad "local_sgd zero steps" "dp.local_steps must be at least 1" "${train[@]}" --set dp.sync=local_sgd --set dp.local_steps=0
expect_bad "precision name" "precision.compute = 'fp8' must be one of fp32, bf16, fp16" "${train[@]}" --set precision.compute=fp8
expect_bad "precision with offloaded parameters" "precision.compute = 'bf16' keeps 16-bit parameter shards in memory" "${train[@]}" --set precision.compute=bf16 --set zero.stage=3 --set offload.optimizer=nvme --set offload.params=nvme --set offload.nvme_dir=/tmp
expect_bad "loss scale below one" "precision.loss_scale must be at least 1" "${train[@]}" --set precision.loss_scale=0.5
expect_bad "backoff out of range" "precision.backoff must be in (0, 1)" "${train[@]}" --set precision.backoff=2
expect_bad "inject overflow syntax" "--inject-overflow takes STEP:RANK" "${train[@]}" --inject-overflow three
expect_bad "grad reduce name" "precision.grad_reduce = 'int8' must be one of fp32, bf16, fp16" "${train[@]}" --set precision.grad_reduce=int8
expect_bad "async with 16-bit reduction" "dp.sync = 'async' reduces gradients in fp32" "${train[@]}" --set dp.sync=async --set precision.grad_reduce=bf16
expect_bad "negative keep_checkpoints" "run.keep_checkpoints must not be negative" "${train[@]}" --set run.keep_checkpoints=-1
expect_bad "checkpoint_every below -1" "run.checkpoint_every must be -1 (never)" "${train[@]}" --set run.checkpoint_every=-2
expect_bad "negative watchdog" "run.watchdog_seconds must not be negative" "${train[@]}" --set run.watchdog_seconds=-1
expect_bad "inject fault syntax" "--inject-fault takes KIND:STEP:RANK" "${train[@]}" --inject-fault explode:1:0
grep -v -e '^\[model\]' -e '^from = ' inputs/tiny.toml > "$work/no_model.toml"
expect_bad "missing [model] section" "no [model] section" "$trident" train --config "$work/no_model.toml" --set run.out_dir="$work/out"
expect_bad "huge layer count" "model.n_layer = 1000000000 must be between 1 and 1024" "${train[@]}" --set model.n_layer=1000000000
expect_bad "model too big for memory" "by the memory model" "${train[@]}" --set model.n_embd=65536 --set model.n_head=64
# ulimit -v bounds a process below the node's memory: a 3.2 GiB model under a 3 GiB limit is
# refused before anything is allocated, naming the limit (it used to fail late inside Kokkos).
if [ $sanitized = 0 ]; then
  expect_bad "model too big for ulimit -v" "of address space that ulimit -v = 2.9 GiB leaves this process" \
    bash -c 'ulimit -v 3000000 && exec "$@"' ulimit "${train[@]}" --set model.n_embd=2048 --set model.n_head=16
else
  echo "left to e2e.bad_input (the plain build): model too big for ulimit -v, which ASan cannot run under"
fi
expect_bad "unknown option" "--bogus" "$trident" train --config inputs/tiny.toml --bogus
expect_bad "no subcommand" "subcommand" "$trident"

# Non-finite numbers are refused, and an export onto its own checkpoint too (it would destroy it).
expect_bad "nan temperature" "--temperature: must be a finite number, not 'nan'" "$trident" generate --ckpt "$good_ckpt" --temperature nan
expect_bad "inf val fraction" "--val-fraction: must be a finite number, not 'inf'" "$trident" prepare --text README.md --out-dir "$work/out" --val-fraction inf
expect_bad "nan plan memory" "--gpu-mem: must be a finite number, not 'nan'" "$trident" plan --layers 2 --hidden 64 --heads 4 --gpu-mem nan
cp "$good_ckpt" "$work/self.h5"
expect_bad "export onto itself" "it is the input '$work/self.h5'" "$trident" ckpt export "$work/self.h5" --llmc "$work/self.h5"
"$trident" ckpt verify "$work/self.h5" > /dev/null || { echo "FAIL [export onto itself]: the checkpoint was damaged"; failures=$((failures + 1)); }
echo "$((cases - failures)) passed, $failures failed"
[ $failures -eq 0 ]
