# What torch_gpt.py and torch_llama.py share: loading dump_reference's HDF5 file into a torch model, the checks, the table.
"""The model-independent half of the PyTorch reference tests.

A family's script defines its model, `build(f, dtype, group="params")` (the model with HDF5 group
`group`'s parameters, via load_params), `trident_name(torch_name)` (trident's global parameter
name for a torch parameter name) and its Tolerances, then calls main(). Every check, the error
measure and the table are here; the scripts' docstrings say what the columns mean.
"""
import collections
import os
import sys

# A missing torch or h5py is a failure, not a skip: `make test` installs both (Debian's
# python3-torch and python3-h5py), so their absence means the set-up is broken.
import h5py
import numpy as np
import torch
import torch.nn.functional as F

# A family's tolerances, on the error measure of rel_err (see the scripts for each one's meaning
# and measured values): loss, logits, grad (trident fp32 vs torch fp64); adam_loss (absolute)
# and adam_param (in step sizes, lr) after the AdamW steps; bf16_loss and bf16_grad (trident
# bf16 vs torch autocast bf16), and bf16_truth_ratio (trident bf16's worst gradient may be at
# most this many times as far from the fp64 truth as autocast's).
Tolerances = collections.namedtuple(
    "Tolerances",
    "loss logits grad adam_loss adam_param bf16_loss bf16_grad bf16_truth_ratio")


def program():
    """The running script's file name (torch_gpt.py, torch_llama.py), which prefixes its lines."""
    return os.path.basename(sys.argv[0])


def attr(f, name):
    v = f.attrs[name]
    return v.item() if hasattr(v, "item") else v


def fail_now(msg):
    print(f"{program()}: FAIL: {msg}")
    sys.exit(1)


def same_names(f, group, model, trident_name, what=None):
    """Fails unless HDF5 group `group` holds exactly the model's parameters; `what` names them in
    the message (default "<group>: tensor sets")."""
    stored = set(f[group].keys())
    ours = {trident_name(n) for n, _ in model.named_parameters()}
    if stored != ours:
        fail_now(f"{what or group + ': tensor sets'} differ: only in trident "
                 f"{sorted(stored - ours)}, only in torch {sorted(ours - stored)}")


def load_params(f, group, model, dtype, trident_name, what=None):
    """The model with HDF5 group `group`'s tensors as its parameters (cast to `dtype`); fails
    unless the group holds exactly them, shape for shape."""
    same_names(f, group, model, trident_name, what)
    with torch.no_grad():
        for n, p in model.named_parameters():
            data = f[group][trident_name(n)][()]
            if tuple(data.shape) != tuple(p.shape):
                fail_now(f"{trident_name(n)}: trident shape {data.shape}, torch {tuple(p.shape)}")
            p.copy_(torch.from_numpy(data).to(dtype))
    return model


def decays(name, p):
    """The usual GPT-2 rule, Llama's too: matrices (every Linear weight, the embeddings, an untied
    head) decay; biases and LayerNorm / RMSNorm gains do not. trident's table
    (src/model/params.cpp) must agree."""
    return p.dim() >= 2


def rel_err(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    scale = np.abs(ref).max()
    diff = np.abs(a - ref).max()
    return diff / scale if scale > 0 else diff


def objective(model, logits, tgt, autocast=False):
    """The mean cross-entropy, plus what the model's last forward added to the objective
    (a Mixture of Experts' balancing losses: model.extra_loss, where the model has one)."""
    flat = logits.view(-1, logits.shape[-1])
    loss = F.cross_entropy(flat.float() if autocast else flat, tgt.view(-1))
    extra = getattr(model, "extra_loss", None)
    return loss + extra if extra is not None else loss


def loss_and_grads(model, idx, tgt, trident_name, autocast=False):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(idx)
        loss = objective(model, logits, tgt, autocast)
    loss.backward()
    grads = {trident_name(n): p.grad.detach().double().numpy() for n, p in model.named_parameters()}
    return loss.item(), logits.detach().double().view(-1, logits.shape[-1]).numpy(), grads


def adam_run(f, build, trident_name, dtype, idx, tgt):
    """The 10-step AdamW run on one batch; returns the losses before each update and the final
    parameters."""
    model = build(f, dtype)
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if decays(n, p)], "weight_decay": attr(f, "weight_decay")},
        {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=attr(f, "lr"), betas=(attr(f, "beta1"), attr(f, "beta2")),
                            eps=attr(f, "eps"), foreach=False)
    losses = []
    for _ in range(attr(f, "adam_steps")):
        opt.zero_grad(set_to_none=True)
        logits = model(idx)
        loss = objective(model, logits, tgt)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    params = {trident_name(n): p.detach().double().numpy() for n, p in named}
    return np.array(losses), params


def check_bf16(f, idx, tgt, check, build, trident_name, tol, strict):
    """trident's bf16 loss and gradients against torch autocast bf16 on the same bf16-rounded
    parameters; the 'torch fp32' column holds instead autocast's distance to the fp64 truth."""
    m64 = build(f, torch.float64, "bf16/params")
    if strict:
        same_names(f, "bf16/grads", m64, trident_name)
    loss64, _, grads64 = loss_and_grads(m64, idx, tgt, trident_name)
    loss_ac, _, grads_ac = loss_and_grads(build(f, torch.float32, "bf16/params"), idx, tgt,
                                          trident_name, autocast=True)
    loss_tr = float(f["bf16/loss"][()])
    print(f"bf16: loss trident {loss_tr:.6f}, torch autocast {loss_ac:.6f}, fp64 {loss64:.6f}; "
          f"trident vs fp64 {abs(loss_tr - loss64) / abs(loss64):.3e}")
    check("bf16 loss (vs autocast)", "[]", abs(loss_tr - loss_ac) / abs(loss_ac),
          abs(loss_ac - loss64) / abs(loss64), tol.bf16_loss)
    worst_truth = 0.0
    for name in f["bf16/grads"].keys():
        g = f["bf16/grads"][name][()]
        worst_truth = max(worst_truth, rel_err(g, grads64[name]))
        check(f"bf16 grad {name} (vs autocast)", str(list(g.shape)), rel_err(g, grads_ac[name]),
              rel_err(grads_ac[name], grads64[name]), tol.bf16_grad)
    worst_ac = max(rel_err(grads_ac[n], grads64[n]) for n in grads64)
    check("bf16 worst grad (vs fp64)", "max", worst_truth, worst_ac,
          tol.bf16_truth_ratio * worst_ac)


def main(doc, build, trident_name, tol, adam_compared=None, strict=False):
    """Runs every check on the HDF5 file named on the command line and prints the table; returns
    the exit status. adam_compared(f, name): the elements of parameter `name` the AdamW parameter
    check compares (None: all of them). strict: also fail when the grads, params_after or
    bf16/grads groups hold other tensors than the model's, or out/losses10 another count of
    losses than the AdamW run (torch_llama.py's checks; torch_gpt.py keeps its original ones)."""
    if len(sys.argv) != 2:
        print(doc)
        return 2
    torch.set_num_threads(1)  # deterministic, and the test machines are shared
    failures = []
    rows = []

    def check(name, shape, err, err32, tol_):
        ok = err <= tol_
        rows.append((name, shape, err, err32, tol_, ok))
        if not ok:
            failures.append(f"{name}: error {err:.3e} > tolerance {tol_:.0e}")

    with h5py.File(sys.argv[1], "r") as f:
        idx = torch.from_numpy(f["batch/inputs"][()].astype(np.int64))
        tgt = torch.from_numpy(f["batch/targets"][()].astype(np.int64))
        m64, m32 = build(f, torch.float64), build(f, torch.float32)
        if strict:
            same_names(f, "grads", m64, trident_name)
            same_names(f, "params_after", m64, trident_name)

        # The weight-decay sets must agree before the AdamW comparison means anything.
        for n, p in m64.named_parameters():
            theirs = bool(f["params"][trident_name(n)].attrs["weight_decay"])
            if theirs != decays(n, p):
                failures.append(f"{trident_name(n)}: trident weight_decay={theirs}, "
                                f"reference expects {decays(n, p)}")

        loss64, logits64, grads64 = loss_and_grads(m64, idx, tgt, trident_name)
        loss32, logits32, grads32 = loss_and_grads(m32, idx, tgt, trident_name)
        loss_tr = float(f["out/loss"][()])
        check("loss", "[]", abs(loss_tr - loss64) / abs(loss64), abs(loss32 - loss64) / abs(loss64),
              tol.loss)
        check("logits", str(list(logits64.shape)), rel_err(f["out/logits"][()], logits64),
              rel_err(logits32, logits64), tol.logits)
        for name in f["params"].keys():  # HDF5 order; the table order is not needed here
            g = f["grads"][name][()]
            check(f"grad {name}", str(list(g.shape)), rel_err(g, grads64[name]),
                  rel_err(grads32[name], grads64[name]), tol.grad)

        check_bf16(f, idx, tgt, check, build, trident_name, tol, strict)

        losses64, after64 = adam_run(f, build, trident_name, torch.float64, idx, tgt)
        losses32, after32 = adam_run(f, build, trident_name, torch.float32, idx, tgt)
        losses_tr = f["out/losses10"][()]
        steps = len(losses64)
        if strict:
            if len(losses_tr) != len(losses64):
                failures.append(f"out/losses10: {len(losses_tr)} losses, expected {len(losses64)}")
            steps = min(len(losses64), len(losses_tr))
        for s in range(steps):
            check(f"adamw loss step {s}", f"{losses64[s]:.6f}", abs(losses_tr[s] - losses64[s]),
                  abs(losses32[s] - losses64[s]), tol.adam_loss)
        lr = attr(f, "lr")
        # A Mixture of Experts routes by comparing scores: over 10 steps a near-tie may route one
        # way at float32 and the other at float64, and then a whole expert's trajectory differs
        # (torch's own float32 run lands steps away from float64 there). Where it does, trident
        # must land no further from float64 than torch's float32 run; elsewhere the tolerance.
        moe = int(f.attrs.get("n_experts", 0)) > 0
        for name in f["params"].keys():
            p_tr, p64, p32 = f["params_after"][name][()], after64[name], after32[name]
            keep = adam_compared(f, name) if adam_compared else None
            if keep is not None:
                p_tr, p64, p32 = p_tr[keep], p64[keep], p32[keep]
            err = np.abs(p_tr - p64).max() / lr
            err32 = np.abs(p32 - p64).max() / lr
            bound = max(tol.adam_param, err32) if moe else tol.adam_param
            check(f"adamw param {name}", str(list(p64.shape)), err, err32, bound)

    width = max(len(r[0]) for r in rows)
    print("trident (fp32) vs torch fp64; 'torch fp32' = torch float32 vs float64 on the same input;"
          " bf16 rows: trident bf16 vs torch autocast bf16, 'torch fp32' = autocast vs fp64")
    print(f"{'tensor':<{width}}  {'shape/value':>12}  {'trident err':>11}  {'torch fp32':>11}"
          f"  {'tolerance':>9}  result")
    for name, shape, err, err32, tol_, ok in rows:
        print(f"{name:<{width}}  {shape:>12}  {err:11.3e}  {err32:11.3e}  {tol_:9.0e}  "
              f"{'ok' if ok else 'FAIL'}")
    grad_errs = [r[2] for r in rows if r[0].startswith("grad ")]
    print(f"summary: loss {rows[0][2]:.3e}, logits {rows[1][2]:.3e}, gradients max "
          f"{max(grad_errs):.3e} (median {float(np.median(grad_errs)):.3e}) over "
          f"{len(grad_errs)} tensors")
    if failures:
        for msg in failures:
            print(f"{program()}: FAIL: {msg}")
        return 1
    print(f"{program()}: all tensors within tolerance")
    return 0
