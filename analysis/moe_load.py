# Expert load of Mixture-of-Experts runs over steps: tokens per expert, imbalance, drops, aux loss.
"""Expert load of Mixture-of-Experts runs, layer by layer, over the steps.

RUN_OR_SWEEP: run directories, sweep directories or timings.h5 files of MoE runs (a dense run is
left out with a warning). trident records per step and MoE layer the slots routed to each expert
(before capacity, summed over the step's micro-batches and data-parallel replicas), the share the
capacity dropped, and the aux and z losses. This script plots, per run, one panel per MoE layer:
each expert's share of the layer's slots against the step (a perfectly balanced router keeps
every line at 1/E, dashed) and the imbalance max/mean on a second axis. Writes moe_load.png,
moe_load.csv and moe_load.md (per run and layer: experts, steps, the last step's imbalance
max/mean, the mean imbalance, the mean dropped share, the last aux loss) and moe_load_slots.csv
(run, step, layer, expert, slots, share) into --out, and prints the Markdown table.
"""
import os
import sys

import trident_runs as tr

import numpy as np  # noqa: E402 (trident_runs checks the interpreter first)
import pandas as pd  # noqa: E402


def moe_runs(runs):
    kept = [r for r in runs if "moe_tokens_per_expert" in r.data]
    for r in runs:
        if r not in kept:
            tr.warn(f"{r.dir}: no per-layer expert load (a dense run, or trident before it was "
                    f"recorded); left out")
    if not kept:
        raise tr.AnalysisError("none of the runs is a Mixture-of-Experts run with expert load")
    return kept


def layers_of(r):
    listed = r.attrs.get("moe_layers", "")
    n = r.data["moe_tokens_per_expert"].shape[1]
    layers = [int(x) for x in str(listed).split(",") if x != ""]
    return layers if len(layers) == n else list(range(n))


def imbalance(tokens):
    """max/mean over the last axis (experts); 0 where nothing was routed."""
    mean = tokens.mean(axis=-1)
    return np.where(mean > 0, tokens.max(axis=-1) / np.where(mean > 0, mean, 1), 0.0)


def long_table(runs):
    frames = []
    for r in runs:
        t = r.data["moe_tokens_per_expert"]  # [steps, layers, E]
        steps, layers = r.data["step"], layers_of(r)
        totals = t.sum(axis=-1, keepdims=True)
        share = np.divide(t, totals, out=np.zeros_like(t), where=totals > 0)
        s, l, e = np.meshgrid(np.arange(t.shape[0]), np.arange(t.shape[1]), np.arange(t.shape[2]),
                              indexing="ij")
        frames.append(pd.DataFrame({
            "run": r.name, "step": steps[s.ravel()], "layer": np.asarray(layers)[l.ravel()],
            "expert": e.ravel(), "slots": t.ravel(), "share": share.ravel()}))
    return pd.concat(frames, ignore_index=True)


def summary(runs):
    rows = []
    for r in runs:
        t = r.data["moe_tokens_per_expert"]
        ratio = imbalance(t)  # [steps, layers]
        dropped = r.data["moe_layer_dropped_fraction"]
        aux = r.data["moe_layer_aux_loss"]
        for j, layer in enumerate(layers_of(r)):
            rows.append({
                "run": r.name, "layer": layer, "experts": int(t.shape[2]),
                "steps": int(t.shape[0]), "last_imbalance": float(ratio[-1, j]),
                "mean_imbalance": float(ratio[:, j].mean()),
                "mean_dropped": float(dropped[:, j].mean()), "last_aux_loss": float(aux[-1, j]),
                "layout": r.layout})
    return pd.DataFrame(rows)


def plot(runs, out_dir):
    plt = tr.pyplot()
    panels = [(r, j, layer) for r in runs for j, layer in enumerate(layers_of(r))]
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.ravel()[len(panels):]:
        ax.set_visible(False)
    for ax, (r, j, layer) in zip(axes.ravel(), panels):
        t = r.data["moe_tokens_per_expert"][:, j, :]
        steps = r.data["step"]
        totals = t.sum(axis=1, keepdims=True)
        share = np.divide(t, totals, out=np.zeros_like(t), where=totals > 0)
        colors = plt.get_cmap("tab20")
        for e in range(t.shape[1]):
            ax.plot(steps, share[:, e], lw=1, color=colors(e % 20), label=f"expert {e}")
        ax.axhline(1.0 / t.shape[1], color="black", ls="--", lw=0.8)
        ax.set_xlabel("step")
        ax.set_ylabel("share of the layer's slots")
        ax.set_title(f"{r.name}: layer {layer}", fontsize=9)
        ax.grid(alpha=0.3)
        twin = ax.twinx()
        twin.plot(steps, imbalance(t), color="black", lw=1.5, label="max/mean")
        twin.set_ylabel("imbalance max/mean")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    return tr.save_figure(fig, out_dir, "moe_load.png", runs,
                          notes=["dashed: 1/E, a balanced router; black: imbalance max/mean"])


def main():
    args, runs = tr.every_step_runs(
        __doc__, paths_help="run directories, sweep directories or timings.h5 files",
        metavar="RUN_OR_SWEEP")
    runs = moe_runs(runs)
    out = tr.output_dir(args.out, runs)
    long_table(runs).to_csv(os.path.join(out, "moe_load_slots.csv"), index=False)
    df = summary(runs)
    text = tr.write_table(df, out, "moe_load",
                          formats={"last_imbalance": ".3f", "mean_imbalance": ".3f",
                                   "mean_dropped": ".4f", "last_aux_loss": ".4f"})
    png = plot(runs, out)
    print(text)
    print(f"wrote {out}/moe_load.csv, moe_load.md, moe_load_slots.csv, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
