#!/usr/bin/env bash
# One command per paper: every row of a paper's table through `trident plan --config`, against the published number and its tolerance.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
papers=(zero2020 megatron2019 narayanan2021 deepspeed_moe2022 megatron_core_moe2024 llama3_2024 torchtitan2024)
usage="usage: bash jobs/reproduce.sh [--detail] [NAME]   (make paper [PAPER=NAME])

Runs every row of a paper's table (inputs/paper/NAME/rows.txt) through \`trident plan --config\`
and prints one line per row and quantity,
  PAPER_ROW paper=NAME row=ROW quantity=Q published=P trident=T error_percent=E
with E = 100 (T / P - 1), then a summary. Each paper's tolerances (the largest |E| allowed per
quantity) come first as PAPER_TOLERANCE lines. Quantities named trident_ref_* have no published
figure and a line of their own kind,
  TRIDENT_REF paper=NAME row=ROW quantity=Q recorded=R trident=T error_percent=E
where R is trident's own documented prediction, recorded in rows.txt so that a change to the
memory model is seen. A quantity memory_ratio_to_BASE is the row's memory per GPU over that of
row BASE (listed before it): how memory grows from one layout to another, which a paper's
figures show even where its absolute memory is its implementation's and not trident's. Needs
only the trident program (make program); no MPI, no data.

NAME: ${papers[*]} or all (the default)
  --detail   also one PAPER_DETAIL line per row (layout, memory, fit, step-time breakdown), what
             tools/paper_tables.py needs to write docs/paper-reproduction.md's tables

environment:
  TRIDENT=build/src/trident   the trident program to run

exit status: 0 every row within its tolerance, 1 a row outside it (or trident failed on one),
2 bad usage, a missing program or a malformed rows.txt."

die() {
  echo "reproduce: error: $*" >&2
  exit 2
}

detail=0
name=
for arg in "$@"; do
  case $arg in
    -h | --help) echo "$usage" && exit 0 ;;
    --detail) detail=1 ;;
    -*) die "unknown option '$arg' (see --help)" ;;
    *) [[ -z $name ]] || die "one NAME only, got '$name' and '$arg'"; name=$arg ;;
  esac
done
name=${name:-all}
if [[ $name == all ]]; then
  selected=("${papers[@]}")
elif [[ " ${papers[*]} " == *" $name "* ]]; then
  selected=("$name")
else
  die "unknown paper '$name'; known: ${papers[*]} all"
fi

trident=${TRIDENT:-$root/build/src/trident}
[[ -x $trident ]] ||
  die "no trident program at $trident: build it with \`make program\` (or set TRIDENT=path)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# field NAME TEXT: the value of NAME=value in TEXT, empty when absent.
field() { { grep -oE "(^| )$1=[^ ]+" <<<"$2" || true; } | head -n 1 | cut -d= -f2; }

# plan_of ROW: trident's `plan` output for ROW (run once per row, kept in $tmp).
plan_of() { cat "$tmp/$1.out"; }

# The quantities a rows.txt may name (docs/paper-reproduction.md says what each is), and
# memory_ratio_to_ROW.
quantities="params_billion active_params_billion tflops_per_gpu model_tflops_per_gpu samples_per_second model_states_gb trident_ref_gb_per_gpu trident_ref_model_states_gb"
known_quantity() { [[ " $quantities " == *" $1 "* || $1 =~ ^memory_ratio_to_[A-Za-z0-9._+-]+$ ]]; }
# value_of QUANTITY OUTPUT: trident's number for QUANTITY in a `plan` output.
value_of() {
  local quantity=$1 out=$2 memory stage
  memory=$(grep '^CONFIG_MEMORY' <<<"$out" || true)
  case $quantity in
    params_billion)
      sed -nE 's/^model: ([0-9.e+]+)B parameters.*/\1/p' <<<"$out" | head -n 1 ;;
    active_params_billion)  # a Mixture of Experts' parameters one token uses
      sed -nE 's/^model: [0-9.e+]+B parameters, ([0-9.e+]+)B active per token.*/\1/p' <<<"$out" | head -n 1 ;;
    tflops_per_gpu | model_tflops_per_gpu | samples_per_second)
      field "$quantity" "$(grep '^CONFIG_TIME' <<<"$out" || true)" ;;
    trident_ref_gb_per_gpu) field total_gb "$memory" ;;
    trident_ref_model_states_gb) field model_states_gb "$memory" ;;
    memory_ratio_to_*)  # this row's memory per GPU over that of an earlier row
      local base=${quantity#memory_ratio_to_} this
      [[ -f $tmp/$base.out ]] || die "$quantity: no row '$base' before this one"
      this=$(field total_gb "$memory")
      memory=$(grep '^CONFIG_MEMORY' "$tmp/$base.out" || true)
      base=$(field total_gb "$memory")
      [[ -n $this && -n $base ]] || return 0
      awk -v t="$this" -v b="$base" 'BEGIN { printf "%.4f\n", t / b }' ;;
    model_states_gb)  # the ZeRO paper's accounting (2 + 2 + 12 bytes) at the config's stage
      stage=$(sed -nE 's/^this config as written:.* ZeRO-([0-3]),.*/\1/p' <<<"$out")
      [[ -n $stage ]] || return 0
      sed -nE 's/^model states per GPU with ZeRO.*: baseline ([0-9.]+) GB, P_os ([0-9.]+) GB, P_os\+g ([0-9.]+) GB, P_os\+g\+p ([0-9.]+) GB.*/\1 \2 \3 \4/p' \
        <<<"$out" | head -n 1 | cut -d' ' -f$((stage + 1)) ;;
    *) die "unknown quantity '$quantity' (known: $quantities)" ;;
  esac
}

# detail_of PAPER ROW OUTPUT: the PAPER_DETAIL line of a row: its layout, memory and step time.
detail_of() {
  local out=$3 layout memory time
  layout=$(sed -nE 's/^this config as written: dp=([0-9]+) (cp=([0-9]+) )?tp=([0-9]+) pp=([0-9]+) \(([0-9]+) ranks?\).* ZeRO-([0-3]),.*micro-batch ([0-9]+) x.*/layout=\1x\4x\5 cp=\3 gpus=\6 zero=\7 micro_batch=\8/p' <<<"$out")
  layout=${layout/cp= /cp=1 }  # no cp in a layout without context parallelism
  ep=$(sed -nE 's/^this config as written: .*, ep=([0-9]+),.*/\1/p' <<<"$out")
  memory=$(grep '^CONFIG_MEMORY' <<<"$out" || true)
  time=$(sed -nE 's/^time model on .*: step ([0-9.]+) s = compute ([0-9.]+) \(recompute ([0-9.]+)\) \+ pipeline ([0-9.]+) \+ tensor-parallel ([0-9.]+) \+ data-parallel ([0-9.]+) exposed \(of ([0-9.]+)\) \+ offload [0-9.]+ \+ expert all-to-all ([0-9.]+) \+ context-parallel ([0-9.]+)$/step_s=\1 compute_s=\2 recompute_s=\3 pipeline_s=\4 tp_s=\5 dp_exposed_s=\6 dp_transferred_s=\7 ep_s=\8 cp_s=\9/p' <<<"$out")
  [[ -n $layout && -n $memory && -n $time ]] || return 1
  echo "PAPER_DETAIL paper=$1 row=$2 $layout ep=${ep:-1} gb_per_gpu=$(field total_gb "$memory")" \
    "model_states_gb=$(field model_states_gb "$memory") fits=$(field fits "$memory") $time"
}

# Each row also goes to $tmp/results: paper, quantity, row, error, tolerance, within (the summary).
: >"$tmp/results"
for paper in "${selected[@]}"; do
  rows=$root/inputs/paper/$paper/rows.txt
  [[ -f $rows ]] || die "no $rows"
  declare -A args_of=()
  declare -A tolerance=()
  while read -r first rest; do
    [[ -z $first || $first == \#* ]] && continue
    if [[ $first == tolerance ]]; then
      read -r quantity percent extra <<<"$rest"
      [[ -n $percent && -z $extra ]] || die "$rows: want 'tolerance QUANTITY PERCENT', got '$first $rest'"
      known_quantity "$quantity" || die "$rows: unknown quantity '$quantity' (known: $quantities memory_ratio_to_ROW)"
      tolerance[$quantity]=$percent
      echo "PAPER_TOLERANCE paper=$paper quantity=$quantity tolerance_percent=$percent"
      continue
    fi
    row=$first
    read -r quantity published config args <<<"$rest"
    [[ -n $config ]] || die "$rows: want 'ROW QUANTITY PUBLISHED CONFIG [ARGS]', got '$row $rest'"
    [[ -n ${tolerance[$quantity]-} ]] || die "$rows: no tolerance line for quantity '$quantity'"
    [[ $row =~ ^[A-Za-z0-9._+-]+$ && $published =~ ^[0-9]*[.]?[0-9]+$ && $published =~ [1-9] ]] ||
      die "$rows: row '$row': want a name of letters, digits and ._+- and a published number > 0"
    key="$config $args"
    if [[ -z ${args_of[$row]-} ]]; then
      args_of[$row]=$key
      read -r -a extra <<<"$args"
      if ! "$trident" plan --config "$root/inputs/paper/$paper/$config" --top 0 "${extra[@]}" \
        >"$tmp/$row.out" 2>"$tmp/$row.err"; then
        echo "reproduce: $paper $row: trident plan --config $config $args failed:" >&2
        cat "$tmp/$row.err" >&2
        : >"$tmp/$row.out"
      fi
      if ((detail)); then
        detail_of "$paper" "$row" "$(plan_of "$row")" ||
          echo "reproduce: $paper $row: no layout, CONFIG_MEMORY or time-model line to detail" >&2
      fi
    elif [[ ${args_of[$row]} != "$key" ]]; then
      die "$rows: row '$row' runs '${args_of[$row]}' and '$key'; one plan per row"
    fi
    value=$(value_of "$quantity" "$(plan_of "$row")")
    if [[ -z $value ]]; then
      echo "reproduce: $paper $row: trident printed no $quantity" >&2
      echo "$paper $quantity $row none ${tolerance[$quantity]} no" >>"$tmp/results"
      continue
    fi
    read -r value error within <<<"$(awk -v t="$value" -v p="$published" -v tol="${tolerance[$quantity]}" \
      'BEGIN { e = 100 * (t / p - 1); a = e < 0 ? -e : e
               printf "%s %+.1f %s\n", (t ~ /e/ ? sprintf("%.6g", t) : t), e, (a <= tol ? "yes" : "no") }')"
    # A paper's figure, or trident's own recorded reference where the paper gives none.
    if [[ $quantity == trident_ref_* ]]; then
      echo "TRIDENT_REF paper=$paper row=$row quantity=$quantity recorded=$published" \
        "trident=$value error_percent=$error"
    else
      echo "PAPER_ROW paper=$paper row=$row quantity=$quantity published=$published" \
        "trident=$value error_percent=$error"
    fi
    echo "$paper $quantity $row $error ${tolerance[$quantity]} $within" >>"$tmp/results"
  done <"$rows"
  unset args_of tolerance
done

# One summary line per paper and quantity: rows, the largest |error| and where, the tolerance.
echo "---"
awk '{ key = $1 " " $2; if (!(key in n)) order[++keys] = key
       n[key]++; tol[key] = $5; if ($6 == "no") { out[key]++; bad = bad "  outside: " $1 " " $3 " " $2 ": " ($4 == "none" ? "no value" : $4 "%") " (tolerance " $5 "%)\n" }
       a = $4 + 0; a = a < 0 ? -a : a
       if ($4 != "none" && (!(key in worst) || a > worst[key])) { worst[key] = a; at[key] = $4 "% at " $3 } }
     END { for (i = 1; i <= keys; i++) { k = order[i]; split(k, pq, " ")
             printf "%-13s %-28s %2d rows, largest error %s, tolerance %s%%%s\n", pq[1], pq[2], n[k],
               (k in at ? at[k] : "none"), tol[k], (k in out ? ": " out[k] " OUTSIDE" : "") }
           printf "%s", bad }' "$tmp/results"
echo "published= is the paper's number, except for quantities named trident_ref_*: the paper gives"
echo "none, and published= is trident's own documented prediction (inputs/paper/NAME/rows.txt)."
total=$(wc -l <"$tmp/results")
failed=$(awk '$6 == "no"' "$tmp/results" | wc -l)
if ((failed > 0)); then
  echo "FAIL: $failed of $total rows outside tolerance (docs/paper-reproduction.md states each)"
  exit 1
fi
echo "OK: all $total rows within tolerance (docs/paper-reproduction.md states each)"
