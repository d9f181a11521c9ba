#!/usr/bin/python3
"""Reads trident's HDF5 outputs (timings.h5, checkpoints) with h5py and checks them."""
import argparse
import math
import sys
import tomllib

import h5py
import numpy as np

PHASES = ["forward", "backward", "recompute", "tp_comm", "pp_wait", "dp_comm", "optimizer",
          "zero_gather", "io", "weight_grad", "ep_comm", "cp_comm"]


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def schema(args):
    with h5py.File(args.timings, "r") as f:
        for attr in ["config", "layout", "git_revision", "hostnames", "slurm_job_id",
                     "start_time", "phases", "format_version", "blas", "segment", "start_step"]:
            if attr not in f.attrs:
                fail(f"attribute {attr} missing")
        config = tomllib.loads(f.attrs["config"])
        if config["run"]["steps"] != args.steps:
            fail(f"stored config has steps={config['run']['steps']}, expected {args.steps}")
        if f.attrs["phases"].split(",") != PHASES:
            fail(f"phases attribute is {f.attrs['phases']}")
        if len(f.attrs["hostnames"].split(",")) != args.ranks:
            fail("one hostname per rank expected")
        rows = args.steps
        for name in ["step", "loss", "val_loss", "lr", "grad_norm", "tokens",
                     "step_seconds_max", "step_seconds_min", "bubble"]:
            if f[name].shape != (rows,):
                fail(f"{name} has shape {f[name].shape}, expected ({rows},)")
        if f["phase_seconds"].shape != (rows, args.ranks, len(PHASES)):
            fail(f"phase_seconds has shape {f['phase_seconds'].shape}")
        if f["peak_memory_bytes"].shape != (rows, args.ranks):
            fail("peak_memory_bytes shape")
        if list(f["step"][:]) != list(range(1, rows + 1)):
            fail("step column is not 1..steps")
        ph = f["phase_seconds"][:]
        for p in ["forward", "backward", "optimizer"]:
            if not (ph[:, :, PHASES.index(p)] > 0).all():
                fail(f"phase {p} not recorded on every step and rank")
        io = ph[:, 0, PHASES.index("io")]
        every = config["run"]["checkpoint_every"]
        for s in range(rows):
            wrote = every >= 0 and ((s + 1) == rows or (every > 0 and (s + 1) % every == 0))
            if wrote != (io[s] > 0):
                fail(f"io phase at step {s + 1} is {io[s]} but a checkpoint was {'' if wrote else 'not '}written")
        if not np.isfinite(f["loss"][:]).all():
            fail("non-finite loss")
        val = f["val_loss"][:]
        if not math.isfinite(val[-1]):
            fail("no validation loss at the last step")
        if (f["step_seconds_max"][:] < f["step_seconds_min"][:]).any():
            fail("max step time below min")
        if (f["tokens"][:] <= 0).any():
            fail("tokens column")
    print(f"timings schema ok: {rows} rows x {args.ranks} ranks x {len(PHASES)} phases")


def losses(path, column="loss"):
    with h5py.File(path, "r") as f:
        return dict(zip(f["step"][:].tolist(), f[column][:].tolist()))


def compare(args):
    """Losses (and with --norms the clipping norms too, with --val the validation losses) of b
    against a, step by step."""
    if args.val:
        a, b = losses(args.a, "val_loss"), losses(args.b, "val_loss")
        evaluated = [s for s in sorted(set(a) & set(b)) if not math.isnan(a[s])]
        if not evaluated:
            fail("no evaluated step in common")
        for s in evaluated:
            rel = abs(a[s] - b[s]) / abs(a[s])
            if rel > args.rtol:
                fail(f"step {s}: validation loss {a[s]} vs {b[s]} (relative {rel:.3g})")
        print(f"validation losses agree on {len(evaluated)} steps")
    if args.norms:
        a, b = losses(args.a, "grad_norm"), losses(args.b, "grad_norm")
        for s in sorted(set(a) & set(b)):
            rel = abs(a[s] - b[s]) / max(abs(a[s]), 1e-30)
            if rel > args.rtol or (args.exact and a[s] != b[s]):
                fail(f"step {s}: gradient norm {a[s]} vs {b[s]} (relative {rel:.3g})")
    a, b = losses(args.a), losses(args.b)
    common = sorted(set(a) & set(b))
    if args.from_step:
        common = [s for s in common if s >= args.from_step]
    if len(common) < args.min_steps:
        fail(f"only {len(common)} common steps")
    worst = 0.0
    for s in common:
        if args.exact:
            if a[s] != b[s]:
                fail(f"step {s}: loss {a[s]!r} != {b[s]!r} (bit-identity expected)")
        else:
            rel = abs(a[s] - b[s]) / abs(a[s])
            worst = max(worst, rel)
            if rel > args.rtol:
                fail(f"step {s}: loss {a[s]} vs {b[s]}, relative difference {rel:.3g} > {args.rtol}")
    print(f"losses{' and gradient norms' if args.norms else ''} agree on steps {common[0]}..{common[-1]}"
          + (" bit for bit" if args.exact else f" (worst relative difference {worst:.3g})"))
    if args.routing:
        compare_routing(args.a, args.b, common)


def compare_routing(path_a, path_b, steps):
    """Mixture of Experts: the tokens each layer routed to each expert, and the dropped share,
    equal at every common step (routing is a function of each replica's micro-batch, so any
    layout that routes the same groups counts the same)."""
    with h5py.File(path_a, "r") as fa, h5py.File(path_b, "r") as fb:
        if "moe_tokens_per_expert" not in fa or "moe_tokens_per_expert" not in fb:
            return
        rows_a = dict(zip(fa["step"][:].tolist(), range(len(fa["step"]))))
        rows_b = dict(zip(fb["step"][:].tolist(), range(len(fb["step"]))))
        for name in ("moe_tokens_per_expert", "moe_dropped_fraction"):
            da, db = np.asarray(fa[name]), np.asarray(fb[name])
            for s in steps:
                if not np.array_equal(da[rows_a[s]], db[rows_b[s]]):
                    fail(f"step {s}: {name} differs: {da[rows_a[s]].tolist()} vs "
                         f"{db[rows_b[s]].tolist()}")
    print(f"expert counts and dropped shares equal at every one of the {len(steps)} steps")


def delayed(args):
    """b (dp.sync = async) applies a's gradients one step late: the same first loss, no first
    update (norm 0), and its second update is a's first (the same norm, bit for bit)."""
    loss_a, loss_b = losses(args.a), losses(args.b)
    norm_a, norm_b = losses(args.a, "grad_norm"), losses(args.b, "grad_norm")
    if loss_a[1] != loss_b[1]:
        fail(f"first losses differ: {loss_a[1]!r} vs {loss_b[1]!r}")
    if norm_b[1] != 0.0:
        fail(f"the delayed run updated at step 1 (norm {norm_b[1]})")
    if norm_b[2] != norm_a[1]:
        fail(f"the delayed run's second update has norm {norm_b[2]!r}, not the first gradient's "
             f"{norm_a[1]!r}")
    if loss_b[2] == loss_a[2]:
        fail("step 2 loss is unchanged by the delay")
    print(f"delayed by one step: norms {norm_b[2]:.6f} (step 2) == {norm_a[1]:.6f} (step 1)")


def differs(args):
    """b's losses differ from a's from --from-step on (a different algorithm really ran)."""
    a, b = losses(args.a), losses(args.b)
    same = [s for s in sorted(set(a) & set(b)) if s >= args.from_step and a[s] == b[s]]
    if same:
        fail(f"losses identical at steps {same}")
    print(f"losses differ from step {args.from_step} on")


def params_equal(args):
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        for group in ["params", "optim/m", "optim/v"]:
            for name in fa[group]:
                if not np.array_equal(fa[group][name][:], fb[group][name][:]):
                    fail(f"{group}/{name} differs")
    print("checkpoints identical")


def grads(args):
    """Every gradient tensor (global shape) of b matches a's to rtol of the tensor's max |a|."""
    worst, worst_name = 0.0, ""
    with h5py.File(args.a, "r") as fa, h5py.File(args.b, "r") as fb:
        names = sorted(fa["params"])
        if sorted(fb["params"]) != names:
            fail("the two files hold different tensors")
        for name in names:
            a, b = fa["params"][name][:], fb["params"][name][:]
            if a.shape != b.shape:
                fail(f"{name}: shape {b.shape} != {a.shape}")
            if not np.isfinite(b).all():
                fail(f"{name}: non-finite gradient")
            scale = max(float(np.abs(a).max()), 1e-30)
            err = float(np.abs(a - b).max()) / scale
            if err > worst:
                worst, worst_name = err, name
            if err > args.rtol:
                fail(f"gradient {name}: max |diff| / max |serial| = {err:.3g} > {args.rtol}")
    print(f"{len(names)} gradients agree (worst {worst:.3g} in {worst_name})")


def memory(args):
    """The memory model's per-rank prediction against what every rank allocated: model states
    (parameters, gradients, master weights, optimizer states) exactly, activations within 5%
    (the issue's bound; trident's formula is exact), and with --all-exact every category
    exactly (activations, communication buffers and workspace included)."""
    with h5py.File(args.timings, "r") as f:
        cats = f.attrs["memory_categories"].split(",")
        predicted = f["predicted_memory_bytes"][:]
        measured = f["peak_memory_by_category"][-1]
    states = [cats.index(c) for c in ["params", "grads", "master_weights", "optimizer"]]
    exact = range(len(cats)) if args.all_exact else states
    act = cats.index("activations")
    worst_act = 0.0
    for rank in range(predicted.shape[0]):
        for c in exact:
            if predicted[rank, c] != measured[rank, c]:
                fail(f"rank {rank} {cats[c]}: predicted {predicted[rank, c]:.0f} B, "
                     f"allocated {measured[rank, c]:.0f} B")
        rel = abs(predicted[rank, act] - measured[rank, act]) / measured[rank, act]
        worst_act = max(worst_act, rel)
        if rel > 0.05:
            fail(f"rank {rank} activations: predicted {predicted[rank, act]:.0f} B, "
                 f"allocated {measured[rank, act]:.0f} B ({rel:.1%} off)")
    total = measured[:, states].sum(axis=1).max()
    print(f"memory model: model states exact on {predicted.shape[0]} ranks (max {total:.0f} B), "
          f"activations within {worst_act:.2%}"
          + ("; every category exact" if args.all_exact else ""))


def phase(args):
    """A phase's time on every step and rank: positive (phase-positive) or zero (phase-zero)."""
    with h5py.File(args.timings, "r") as f:
        seconds = f["phase_seconds"][:, :, PHASES.index(args.phase)]
    if args.cmd == "phase-positive" and not (seconds > 0).all():
        fail(f"phase {args.phase} is zero on some step and rank")
    if args.cmd == "phase-zero" and (seconds != 0).any():
        fail(f"phase {args.phase} is timed ({seconds.max():.3g} s) where nothing runs it")
    print(f"phase {args.phase}: total {seconds.sum():.4f} s over {seconds.size} step-ranks")


def peak_activations(path):
    with h5py.File(path, "r") as f:
        cats = f.attrs["memory_categories"].split(",")
        return f["peak_memory_by_category"][-1][:, cats.index("activations")]


def activations_less(args):
    """b's activation peak is below a's on every rank (recomputation saves memory)."""
    a, b = peak_activations(args.a), peak_activations(args.b)
    if a.shape != b.shape or not (b < a).all():
        fail(f"activations per rank: {b.tolist()} not all below {a.tolist()}")
    print(f"activations per rank {a.tolist()} -> {b.tolist()} B "
          f"(max {b.max() / a.max():.1%} of before)")


def cp_bytes(args):
    """Every rank's context-parallel bytes of every step equal the formula, from the stored config:
    per layer and micro-batch n_kv = micro_batch x seq_len / cp x 2 x kv_heads_tp x head_size
    elements of keys and values in the storage format, sent (cp - 1) times in forward (again with
    full recomputation) and in backward, and their fp32 gradients cp times around the ring (cp - 1
    times reduce-scattered after an all-gather)."""
    with h5py.File(args.timings, "r") as f:
        config = tomllib.loads(f.attrs["config"])
        sent = f["cp_bytes"][:]
    m, par, train = config["model"], config["parallel"], config["train"]
    cp, tp = par["cp"], par["tp"]
    kv_heads = m.get("n_kv_head", 0) or m["n_head"]
    kv_tp = max(1, kv_heads // tp)
    head_size = m["n_embd"] // m["n_head"]
    n_kv = train["micro_batch_size"] * train["seq_len"] // cp * 2 * kv_tp * head_size
    stored = 4 if config["precision"]["compute"] == "fp32" else 2
    forwards = 2 if config["recompute"]["policy"] == "full" else 1
    grad_hops = cp if par["cp_comm"] == "ring" else cp - 1
    per_layer = (cp - 1) * n_kv * stored * (forwards + 1) + grad_hops * n_kv * 4
    micro_batches = train["batch_size"] // par["dp"] // train["micro_batch_size"]
    want = per_layer * m["n_layer"] // par["pp"] * micro_batches
    if sent.shape[1] != cp * tp * par["dp"] * par["pp"]:
        fail(f"cp_bytes has {sent.shape[1]} ranks")
    if not (sent == want).all():
        fail(f"cp_bytes per rank and step {np.unique(sent)}, expected {want} "
             f"({per_layer} per layer and micro-batch)")
    print(f"cp_bytes: {want} bytes per rank and step on every rank and step "
          f"({per_layer} per layer and micro-batch, cp={cp} {par['cp_comm']})")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("schema")
    s.add_argument("timings")
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--ranks", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--from-step", type=int, default=0)
    c.add_argument("--min-steps", type=int, default=1)
    c.add_argument("--exact", action="store_true")
    c.add_argument("--rtol", type=float, default=1e-5)
    c.add_argument("--norms", action="store_true", help="compare the gradient norms too")
    c.add_argument("--val", action="store_true", help="compare the validation losses too")
    c.add_argument("--routing", action="store_true",
                   help="Mixture of Experts: expert counts and dropped shares equal at every step")
    g = sub.add_parser("grads")
    g.add_argument("a")
    g.add_argument("b")
    g.add_argument("--rtol", type=float, default=1e-5)
    mm = sub.add_parser("memory")
    mm.add_argument("timings")
    mm.add_argument("--all-exact", action="store_true")
    for name in ["phase-positive", "phase-zero"]:
        ph = sub.add_parser(name)
        ph.add_argument("timings")
        ph.add_argument("phase", choices=PHASES)
    al = sub.add_parser("activations-less")
    al.add_argument("a")
    al.add_argument("b")
    for name in ["delayed", "differs"]:
        d = sub.add_parser(name)
        d.add_argument("a")
        d.add_argument("b")
        d.add_argument("--from-step", type=int, default=1)
    e = sub.add_parser("params-equal")
    e.add_argument("a")
    e.add_argument("b")
    cb = sub.add_parser("cp-bytes")
    cb.add_argument("timings")
    args = p.parse_args()
    {"schema": schema, "compare": compare, "grads": grads, "memory": memory,
     "params-equal": params_equal, "phase-positive": phase, "phase-zero": phase,
     "activations-less": activations_less, "delayed": delayed, "differs": differs,
     "cp-bytes": cp_bytes}[args.cmd](args)


if __name__ == "__main__":
    main()
