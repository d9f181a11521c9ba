# Measured peak memory by category against trident's memory model, per run.
"""Peak memory by category per run, measured against the memory model's prediction.

PATH: sweep directories, run directories or timings.h5 files (e.g. runs/zero_memory/<jobid>).
Per run it takes the rank with the largest measured total (the sum over categories of its peaks)
and, per category (params, grads, master_weights, optimizer, activations, comm_buffers,
workspace) and for the total:
  measured_bytes   peak over all steps (max of peak_memory_by_category over steps)
  predicted_bytes  the memory model's prediction for that rank (predicted_memory_bytes)
  ratio            measured / predicted; 1 when both are 0, inf when only the prediction is 0
A model_states row sums params, grads, master_weights and optimizer; its reduction_vs_zero0 column
is the model states of the ZeRO-0 run with the same dp, tp, pp and precision divided by this run's
(what each ZeRO stage saves, as in the ZeRO paper's Figure 1; empty without such a peer), next to
two ideals that ignore working buffers and padding: ideal_reduction for trident's bytes per
parameter (16-bit compute: 2 parameter + 4 gradient + 4 master + 8 moment bytes; fp32: 4 + 4 + 0
+ 8) and paper_reduction for the ZeRO paper's 2 + 2 + 12 (limits 4x, 8x and dp x).
The total row also gives peak_bytes, the rank's accounted high-water mark of all categories
together (max of peak_memory_bytes), which is at most the sum of the category peaks.
Writes memory.csv (one row per run and category, bytes), memory.md (one row per run, MiB as
"measured (predicted)", the total ratio and the category furthest from 1) and memory.png
(measured and modelled bars per run, stacked by category; a category that is 0 in every run,
such as master_weights under fp32, is left out of the figure) into --out, and prints the
Markdown.
Every step counts here (memory peaks are not timed, so --warmup does not apply). Failed, partial
or unreadable runs are left out with a warning (--strict: an error).
"""
import sys

import trident_runs as tr

import numpy as np  # noqa: E402 (trident_runs checks the interpreter first)
import pandas as pd  # noqa: E402


def ratio(measured, predicted):
    if predicted == 0:
        return 1.0 if measured == 0 else float("inf")
    return measured / predicted


MODEL_STATES = ("params", "grads", "master_weights", "optimizer")


def ideal_reduction(stage, dp, precision):
    """ZeRO-0 over stage model states for trident's bytes per parameter, without buffers."""
    p, g, m, o = (4, 4, 0, 8) if precision == "fp32" else (2, 4, 4, 8)
    total = p + g + m + o
    return total / [total, p + g + (m + o) / dp, p + (g + m + o) / dp, total / dp][stage]


def paper_reduction(stage, dp, k=12.0):
    """The same for the ZeRO paper's 2 + 2 + K bytes (Rajbhandari et al. 2020, Figure 1)."""
    return (4 + k) / [4 + k, 4 + k / dp, 2 + (2 + k) / dp, (4 + k) / dp][stage]


def tables(runs):
    rows, wide = [], []
    cats = runs[0].categories
    for r in runs:
        if r.categories != cats:
            raise tr.AnalysisError(f"{r.dir}: memory categories {r.categories} differ from "
                                   f"{runs[0].dir}'s")
        measured = r.data["peak_memory_by_category"].max(axis=0)  # [ranks, categories]
        predicted = r.data["predicted_memory_bytes"]
        if predicted.shape != measured.shape:
            raise tr.AnalysisError(f"{r.dir}: predicted_memory_bytes has shape {predicted.shape}, "
                                   f"the measured peaks {measured.shape}")
        rank = int(np.argmax(measured.sum(axis=1)))
        common = {"run": r.name, "rank": rank, "ranks": r.ranks, "dp": r.cfg("parallel.dp"),
                  "tp": r.cfg("parallel.tp"), "pp": r.cfg("parallel.pp"),
                  "zero_stage": r.cfg("zero.stage"), "precision": r.cfg("precision.compute")}
        md = dict(common)
        worst = ("", 1.0)
        for c, name in enumerate(cats):
            m, p = float(measured[rank, c]), float(predicted[rank, c])
            q = ratio(m, p)
            rows.append({**common, "category": name, "measured_bytes": m, "predicted_bytes": p,
                         "ratio": q, "peak_bytes": np.nan, "run_dir": r.dir})
            md[name] = f"{m / tr.MIB:.3f} ({p / tr.MIB:.3f})"
            if abs(q - 1.0) > abs(worst[1] - 1.0):
                worst = (name, q)
        states = [cats.index(c) for c in MODEL_STATES if c in cats]
        m, p = float(measured[rank, states].sum()), float(predicted[rank, states].sum())
        rows.append({**common, "category": "model_states", "measured_bytes": m,
                     "predicted_bytes": p, "ratio": ratio(m, p), "peak_bytes": np.nan,
                     "run_dir": r.dir})
        md["model states"] = f"{m / tr.MIB:.3f} ({p / tr.MIB:.3f})"
        m, p = float(measured[rank].sum()), float(predicted[rank].sum())
        peak = float(r.data["peak_memory_bytes"][:, rank].max())
        rows.append({**common, "category": "total", "measured_bytes": m, "predicted_bytes": p,
                     "ratio": ratio(m, p), "peak_bytes": peak, "run_dir": r.dir})
        md["total"] = f"{m / tr.MIB:.3f} ({p / tr.MIB:.3f})"
        md["ratio"] = f"{ratio(m, p):.4f}"
        md["furthest from 1"] = f"{worst[0]} {worst[1]:.4f}" if worst[0] else "all exact"
        wide.append(md)
    df, wide = pd.DataFrame(rows), pd.DataFrame(wide)
    # Model-state reduction against the ZeRO-0 run of the same shape and precision.
    key = ["dp", "tp", "pp", "precision"]
    states = df[df["category"] == "model_states"]
    zero0 = states[states["zero_stage"] == 0].drop_duplicates(key).set_index(key)["measured_bytes"]
    for column in ("reduction_vs_zero0", "ideal_reduction", "paper_reduction"):
        df[column] = np.nan
    wide["vs ZeRO-0 (ideal, paper)"] = ""
    for i, row in states.iterrows():
        peer = tuple(row[k] for k in key)
        if peer in zero0.index and row["measured_bytes"] > 0:
            x = zero0.loc[peer] / row["measured_bytes"]
            ideal = ideal_reduction(int(row["zero_stage"]), int(row["dp"]), row["precision"])
            paper = paper_reduction(int(row["zero_stage"]), int(row["dp"]))
            df.loc[i, ["reduction_vs_zero0", "ideal_reduction", "paper_reduction"]] = \
                [x, ideal, paper]
            wide.loc[wide["run"] == row["run"], "vs ZeRO-0 (ideal, paper)"] = \
                f"{x:.2f}x ({ideal:.2f}x, {paper:.2f}x)"
    return df, wide, cats


def plot(df, cats, loaded, out_dir):
    plt = tr.pyplot()
    from matplotlib.patches import Patch
    runs = list(dict.fromkeys(df["run"]))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(runs) + 3), 4.8))
    x = np.arange(len(runs))
    width = 0.38
    colors = plt.get_cmap("tab10")
    for side, column, hatch in ((-1, "measured_bytes", None), (1, "predicted_bytes", "//")):
        bottom = np.zeros(len(runs))
        for i, cat in enumerate(cats):
            sel = df[df["category"] == cat].set_index("run").loc[runs]
            if not (sel["measured_bytes"].any() or sel["predicted_bytes"].any()):
                continue  # e.g. master_weights under fp32: no empty legend entry
            mib = sel[column].to_numpy() / tr.MIB
            ax.bar(x + side * width / 2, mib, width, bottom=bottom, color=colors(i % 10),
                   hatch=hatch, edgecolor="white" if hatch else None,
                   label=cat if side < 0 else None)
            bottom += mib
    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(facecolor="grey", label="left: measured"),
                Patch(facecolor="grey", hatch="//", edgecolor="white", label="right: modelled")]
    ax.set_xticks(x)
    ax.set_xticklabels([f"{r}\n(rank {k})" for r, k in
                        zip(runs, df.groupby("run", sort=False)["rank"].first().loc[runs])],
                       rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("MiB (peak per category)")
    ax.set_title("memory by category: measured vs memory model, rank with the largest total")
    ax.legend(handles=handles, fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return tr.save_figure(fig, out_dir, "memory.png", loaded, oversubscription=False)


def main():
    args, runs = tr.every_step_runs(__doc__)
    df, wide, cats = tables(runs)
    out = tr.output_dir(args.out, runs)
    text = tr.write_table(df, out, "memory", md_df=wide)
    png = plot(df, cats, runs, out)
    print("peak memory by category, MiB: measured (predicted by the memory model), on the rank "
          "with the largest measured total\n")
    print(text)
    print(f"wrote {out}/memory.csv, memory.md, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(tr.run_main(main))
