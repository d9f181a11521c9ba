#!/usr/bin/env python3
# Writes (or, with --check, verifies) the tables of docs/paper-reproduction.md from `jobs/reproduce.sh --detail all`'s output.
"""Each table sits between `<!-- paper-table:NAME -->` and `<!-- /paper-table -->` in the docs;
everything in a table is what the output says (PAPER_TOLERANCE, PAPER_ROW and PAPER_DETAIL
lines), so a table can not drift from trident. Usage:

    bash jobs/reproduce.sh --detail all > paper.out
    python3 tools/paper_tables.py paper.out            # rewrite the tables
    python3 tools/paper_tables.py --check paper.out    # exit 1 with a diff when they are stale
"""
import argparse
import difflib
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGION = re.compile(r"(<!-- paper-table:([\w.-]+) -->\n)(.*?)(<!-- /paper-table -->)", re.S)


def parse(text):
    """(tolerances, rows, details): tolerances[paper][quantity] = percent, rows[paper][row][quantity]
    = {published, trident, error_percent}, details[paper][row] = the PAPER_DETAIL fields."""
    tolerances, rows, details = defaultdict(dict), defaultdict(lambda: defaultdict(dict)), defaultdict(dict)
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("PAPER_TOLERANCE", "PAPER_ROW", "TRIDENT_REF", "PAPER_DETAIL"):
            continue
        f = dict(item.split("=", 1) for item in rest.split())
        if kind == "PAPER_TOLERANCE":
            tolerances[f["paper"]][f["quantity"]] = f["tolerance_percent"]
        elif kind == "PAPER_ROW":
            rows[f["paper"]][f["row"]][f["quantity"]] = f
        elif kind == "TRIDENT_REF":  # trident's own recorded figure, where the paper has none
            rows[f["paper"]][f["row"]][f["quantity"]] = dict(f, published=f["recorded"])
        else:
            details[f["paper"]][f["row"]] = f
    return tolerances, rows, details


def table(header, body):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in body])


def seconds(value):
    return "0" if float(value) == 0 else value


def signed(error):
    return error.replace("-", "−") + "%"


class Tables:
    def __init__(self, text):
        self.tolerances, self.rows, self.details = parse(text)

    def need(self, paper, prefix=""):
        """The rows of paper whose id starts with prefix, each with its detail, in output order."""
        ids = [r for r in self.rows.get(paper, {}) if r.startswith(prefix)]
        if not ids:
            sys.exit(f"paper_tables: no {paper} rows{' ' + prefix + '*' if prefix else ''} in the "
                     "output; run `bash jobs/reproduce.sh --detail all`")
        for r in ids:
            if r not in self.details[paper]:
                sys.exit(f"paper_tables: no PAPER_DETAIL line for {paper} {r}; run reproduce.sh --detail")
        return [(r, self.rows[paper][r], self.details[paper][r]) for r in ids]

    @staticmethod
    def against(q, name):
        """'published / trident (error)' for a published quantity, '–' where the row has none."""
        if name not in q:
            return "–"
        f = q[name]
        return f"{f['published']} / {f['trident']} ({signed(f['error_percent'])})"

    @staticmethod
    def reference(q, name):
        """trident's value, and its error against the recorded reference where it is not 0.0%."""
        f = q[name]
        if float(f["error_percent"]) == 0:
            return f["trident"]
        return f"{f['trident']} ({signed(f['error_percent'])} from the reference {f['published']})"

    def tolerances_table(self):
        body = []
        for paper, quantities in self.tolerances.items():
            for quantity, percent in quantities.items():
                errors = [(q[quantity]["error_percent"], r) for r, q in self.rows[paper].items()
                          if quantity in q]
                worst = max(errors, key=lambda e: abs(float(e[0]))) if errors else None
                body.append([paper, f"`{quantity}`", f"±{percent}%", str(len(errors)),
                             f"{signed(worst[0])} ({worst[1]})" if worst else "–"])
        return table(["paper", "quantity", "tolerance", "rows", "largest error now"], body)

    def megatron2019(self):
        body = [[r, d["layout"].replace("x", " × "), self.against(q, "params_billion"),
                 self.reference(q, "trident_ref_gb_per_gpu"), d["model_states_gb"], d["fits"]]
                for r, q, d in self.need("megatron2019")]
        return table(["row", "dp × tp × pp", "parameters, B: Table 1 / trident",
                      "GB per GPU, busiest rank", "model states GB",
                      "fits a 32 GB V100 (90% − 2 GB)"], body)

    def narayanan2021_table1(self):
        body = []
        for r, q, d in self.need("narayanan2021", "t1-"):
            step = (f"{d['step_s']}: {d['compute_s']} ({d['recompute_s']}) / {seconds(d['pipeline_s'])}"
                    f" / {seconds(d['tp_s'])} / {seconds(d['dp_exposed_s'])}")
            body.append([r, d["layout"].replace("x", " × "), d["gpus"], self.against(q, "params_billion"),
                         self.reference(q, "trident_ref_gb_per_gpu"), d["fits"],
                         self.against(q, "tflops_per_gpu"), step])
        return table(["row", "dp × tp × pp", "GPUs", "parameters, B: published / trident",
                      "GB per GPU", "fits 80 GB", "TFLOP/s per GPU: published / trident",
                      "step s: compute (recompute) / pipeline / tp / dp"], body)

    def narayanan2021_table2(self):
        body = []
        for r, q, d in self.need("narayanan2021", "t2-"):
            step = (f"{d['step_s']}: {d['compute_s']} / {seconds(d['dp_exposed_s'])} "
                    f"({d['dp_transferred_s']}) / {seconds(d['pipeline_s'])} / {seconds(d['tp_s'])}")
            body.append([r, d["layout"].replace("x", " × "), d["gpus"], d["micro_batch"],
                         self.reference(q, "trident_ref_gb_per_gpu"), d["fits"],
                         self.against(q, "tflops_per_gpu"), step])
        return table(["row", "dp × tp × pp", "GPUs", "micro-batch", "GB per GPU",
                      "fits 80 GB", "TFLOP/s per GPU: published / trident",
                      "step s: compute / dp exposed (of transferred) / pipeline / tp"], body)

    def zero2020(self):
        body = [[r, d["zero"], self.against(q, "model_states_gb"),
                 self.reference(q, "trident_ref_model_states_gb"), d["gb_per_gpu"], d["fits"]]
                for r, q, d in self.need("zero2020")]
        return table(["row", "ZeRO stage", "model states GB, 2 + 2 + 12 bytes: Figure 1 / trident",
                      "trident's own model states GB", "GB per GPU", "fits 32 GB"],
                     body)

    def deepspeed_moe2022(self):
        ids = list(self.rows.get("deepspeed_moe2022", {}))
        if not ids:
            sys.exit("paper_tables: no deepspeed_moe2022 rows in the output; run "
                     "`bash jobs/reproduce.sh --detail all`")
        body = [[r, self.against(self.rows["deepspeed_moe2022"][r], "params_billion")] for r in ids]
        return table(["row", "parameters, B: Table 1 / trident"], body)

    def megatron_core_moe2024(self):
        body = []
        for r, q, d in self.need("megatron_core_moe2024"):
            step = (f"{d['step_s']}: {d['compute_s']} / {seconds(d['ep_s'])} / {seconds(d['pipeline_s'])}"
                    f" / {seconds(d['dp_exposed_s'])}")
            body.append([r, d["layout"].replace("x", " × ") + f" × ep {d['ep']}", d["gpus"],
                         self.against(q, "params_billion"), self.against(q, "active_params_billion"),
                         self.against(q, "model_tflops_per_gpu"),
                         self.reference(q, "trident_ref_gb_per_gpu"), d["fits"], step])
        return table(["row", "dp × tp × pp × ep", "GPUs", "parameters, B", "active, B",
                      "model TFLOP/s per GPU: published / trident", "trident's GB per GPU",
                      "fits 80 GB", "step s: compute / all-to-all / pipeline / dp"], body)

    def llama3_2024(self):
        body = []
        for r, q, d in self.need("llama3_2024"):
            step = (f"{d['step_s']}: {d['compute_s']} / {seconds(d['pipeline_s'])} / {seconds(d['tp_s'])}"
                    f" / {seconds(d['cp_s'])} / {seconds(d['dp_exposed_s'])}")
            dp, tp, pp = d["layout"].split("x")
            body.append([r, f"{dp} × {d['cp']} × {tp} × {pp}", d["gpus"],
                         self.against(q, "model_tflops_per_gpu"),
                         self.reference(q, "trident_ref_gb_per_gpu"), d["fits"], step])
        return table(["row", "dp × cp × tp × pp", "GPUs", "model TFLOP/s per GPU: Table 4 / trident",
                      "trident's GB per GPU", "fits 80 GB", "step s: compute / pipeline / tp / cp / dp"],
                     body)

    def torchtitan2024(self):
        body = [[r, d["layout"].split("x")[0] + f" × cp {d['cp']}", d["gpus"],
                 self.against(q, "memory_ratio_to_cp1"), self.reference(q, "trident_ref_gb_per_gpu"),
                 d["model_states_gb"], d["fits"]]
                for r, q, d in self.need("torchtitan2024")]
        return table(["row", "dp × cp", "GPUs", "memory over CP 1's: published / trident",
                      "trident's GB per GPU", "model states GB", "fits 80 GB"], body)

    def render(self, name):
        makers = {"tolerances": self.tolerances_table, "megatron2019": self.megatron2019,
                  "deepspeed_moe2022": self.deepspeed_moe2022,
                  "megatron_core_moe2024": self.megatron_core_moe2024,
                  "llama3_2024": self.llama3_2024, "torchtitan2024": self.torchtitan2024,
                  "narayanan2021-table1": self.narayanan2021_table1,
                  "narayanan2021-table2": self.narayanan2021_table2, "zero2020": self.zero2020}
        if name not in makers:
            sys.exit(f"paper_tables: unknown table '{name}' in the docs (known: {', '.join(makers)})")
        return makers[name]()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", help="jobs/reproduce.sh --detail all's output ('-': stdin)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 with a diff when a table differs from the output")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "paper-reproduction.md")
    args = parser.parse_args()
    text = sys.stdin.read() if args.output == "-" else Path(args.output).read_text()
    tables = Tables(text)
    docs = args.docs.read_text()
    names = [m.group(2) for m in REGION.finditer(docs)]
    if not names:
        sys.exit(f"paper_tables: no <!-- paper-table:NAME --> region in {args.docs}")
    new = REGION.sub(lambda m: m.group(1) + "\n" + tables.render(m.group(2)) + "\n\n" + m.group(4), docs)
    if new == docs:
        print(f"paper_tables: {args.docs.name}: {len(names)} tables ({', '.join(names)}) match the output")
        return 0
    if args.check:
        sys.stdout.writelines(difflib.unified_diff(docs.splitlines(True), new.splitlines(True),
                                                   str(args.docs), "from the output"))
        print(f"paper_tables: {args.docs} is stale; regenerate it: bash jobs/reproduce.sh --detail all"
              " > paper.out && python3 tools/paper_tables.py paper.out", file=sys.stderr)
        return 1
    args.docs.write_text(new)
    print(f"paper_tables: rewrote {len(names)} tables in {args.docs} ({', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
