# Loss curves of several runs side by side, labelled by what differs between their configs.
"""Loss curves of several runs, labelled by what differs between them.

RUN_OR_SWEEP: run directories, sweep directories or timings.h5 files. Each run is labelled by the
config keys whose values differ between the runs given (dp.sync, precision.compute,
parallel.dp, ...; bookkeeping such as run.name, run.out_dir or run.checkpoint_every does not
count, dp.local_steps shows only under local_sgd), or by its directory name when the configs are
the same. Plots the training loss against the step (lines) and the validation loss
where it was evaluated (markers, same colour). Writes convergence.png, convergence.csv and
convergence.md (per run: steps, final loss, final validation loss, the lowest loss, the step of
the last validation, skipped fp16 steps) and convergence_curves.csv (run, step, loss, val_loss;
empty val_loss where not evaluated) into --out, and prints the Markdown table.
Every step counts (no warm-up is left out). Failed, partial or unreadable runs are left out with
a warning (--strict: an error).
"""
import os
import sys

import trident_runs as tr

import numpy as np  # noqa: E402 (trident_runs checks the interpreter first)
import pandas as pd  # noqa: E402


# Keys that do not change the losses (bookkeeping), and keys that matter only in some modes.
IGNORED = ("run.name", "run.out_dir", "run.log_every", "run.checkpoint_every",
           "run.keep_checkpoints", "run.watchdog_seconds", "run.peak_tflops")
ONLY_WHEN = {"dp.local_steps": ("dp.sync", "local_sgd"),
             "parallel.virtual_stages": ("parallel.schedule", "interleaved")}


def labels(runs):
    keys = tr.differing_keys(runs, ignore=IGNORED)
    out = []
    for r in runs:
        flat = tr.flat_config(r.config)
        shown = [k for k in keys
                 if k not in ONLY_WHEN or flat.get(ONLY_WHEN[k][0]) == ONLY_WHEN[k][1]]
        out.append(" ".join(f"{k}={flat.get(k, '-')}" for k in shown) if keys else r.name)
    if len(set(out)) < len(out):  # same config in different runs: the names tell them apart
        out = [f"{label} ({r.name})" if keys else label for label, r in zip(out, runs)]
    return out


def table(runs, names):
    rows = []
    for r, label in zip(runs, names):
        steps, loss, val = r.data["step"], r.data["loss"], r.data["val_loss"]
        evaluated = np.flatnonzero(np.isfinite(val))
        last = evaluated[-1] if len(evaluated) else None
        rows.append({
            "run": r.name, "label": label, "steps": int(len(steps)),
            "final_step": int(steps[-1]), "final_loss": float(loss[-1]),
            "final_val_loss": float(val[last]) if last is not None else np.nan,
            "final_val_step": int(steps[last]) if last is not None else np.nan,
            "min_loss": float(np.nanmin(loss)), "skipped_steps": int(r.data["skipped"].sum()),
            "layout": r.layout, "run_dir": r.dir,
        })
    return pd.DataFrame(rows)


def curves(runs):
    frames = [pd.DataFrame({"run": r.name, "step": r.data["step"], "loss": r.data["loss"],
                            "val_loss": r.data["val_loss"]}) for r in runs]
    return pd.concat(frames, ignore_index=True)


def plot(runs, names, out_dir):
    plt = tr.pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.get_cmap("tab10")
    for i, (r, label) in enumerate(zip(runs, names)):
        color = colors(i % 10)
        ax.plot(r.data["step"], r.data["loss"], "-", color=color, lw=1.2, label=label)
        val = np.isfinite(r.data["val_loss"])
        if val.any():
            ax.plot(r.data["step"][val], r.data["val_loss"][val], "o", color=color, ms=5,
                    mfc="none")
    ax.plot([], [], "o", color="grey", mfc="none", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (lines: training, circles: validation)")
    ax.set_title("convergence")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return tr.save_figure(fig, out_dir, "convergence.png", runs)


def main():
    args, runs = tr.every_step_runs(
        __doc__, paths_help="run directories, sweep directories or timings.h5 files",
        metavar="RUN_OR_SWEEP")
    names = labels(runs)
    df = table(runs, names)
    out = tr.output_dir(args.out, runs)
    curves(runs).to_csv(os.path.join(out, "convergence_curves.csv"), index=False)
    text = tr.write_table(df, out, "convergence", md_df=df.drop(columns=["run_dir"]),
                          formats={"final_loss": ".4f", "final_val_loss": ".4f",
                                   "min_loss": ".4f", "final_val_step": ".0f"})
    png = plot(runs, names, out)
    print(text)
    print(f"wrote {out}/convergence.csv, convergence.md, convergence_curves.csv, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
