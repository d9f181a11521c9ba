# Shared loader for the analysis scripts: finds runs in sweep directories and reads their timings.
"""Loads trident runs for analysis/*.py; not a command of its own.

Paths given to a script may be
  a sweep directory  runs/<experiment>/<jobid>/, as jobs/ writes it: sweep.json and one run
                     directory per layout (a directory without sweep.json whose subdirectories are
                     run directories counts too, e.g. bench/pipeline_bubble.sh's output);
  a run directory    status, run.json, trident.log and timings.h5 (any of them marks one);
  a timings.h5 file  its directory is the run directory.

A run is left out, with one warning line on stderr naming its directory and the reason, when its
`status` is not `completed`, it has no timings.h5, the file does not open or lacks a dataset, or
it is partial (its last step is below the config's run.steps: the job was killed). --strict makes
each of these an error. A missing path, a directory that is neither kind, no usable run left, or
a run without timed steps is an error: `<script>: error: ...` on stderr and exit status 2.

Timed steps: the steps after the first WARMUP ones (--warmup, default 3: caches, allocator and
MPI connections warm up) that wrote no checkpoint (io phase 0 on every rank; a checkpoint write
inflates the step time).

Repeats: jobs/ run a layout REPEATS times as <layout>_rep1, <layout>_rep2, ... (run.json: layout,
repeat, repeats). Runs with the same layout (run.json's, else the directory name without
`_rep<k>`), ranks, threads per rank, nodes and resolved config (run.name and run.out_dir aside)
are repeats of one measurement, in one sweep or several; group_runs() collects them and the
scripts report the median over repeats of each run's median, with the min-max spread.

Provenance: each run's git revision, BLAS (library and kernel) and CPU model, from timings.h5
(git_revision, blas, cpu_model) or else sweep.json's "provenance" object; absent is unknown and
differs from nothing. Runs that differ in any of them are refused (one error naming the sweeps or
runs and what differs) unless --allow-mixed-provenance, which makes it a warning and a caveat on
every figure.
"""
import json
import os
import re
import shlex
import sys
import textwrap

# The interpreter first: a clear message instead of a traceback when a module is missing.
NEEDED_MODULES = ("h5py", "numpy", "pandas", "matplotlib")
DEBIAN_PACKAGES = "python3-h5py python3-numpy python3-pandas python3-matplotlib"


def require_modules(names=NEEDED_MODULES):
    """Imports each module; on failure prints which one, the interpreter and how to install the
    four, and exits with status 2."""
    import importlib
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            print(f"{os.path.basename(sys.argv[0])}: error: the analysis needs the Python module "
                  f"'{name}', which this interpreter ({sys.executable}, Python "
                  f"{sys.version.split()[0]}) cannot import: {e}\n"
                  f"  Debian/Ubuntu: apt-get install {DEBIAN_PACKAGES}, then run the script "
                  f"with /usr/bin/python3\n"
                  f"  elsewhere: {sys.executable} -m pip install h5py numpy pandas matplotlib",
                  file=sys.stderr)
            sys.exit(2)


require_modules()

import h5py  # noqa: E402 (after the check above)
import numpy as np  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11: the same parser as the tomli package
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        print(f"{os.path.basename(sys.argv[0])}: error: reading trident's configs needs Python "
              f">= 3.11 (tomllib) or the tomli package; this is Python {sys.version.split()[0]}",
              file=sys.stderr)
        sys.exit(2)

DATASETS_1D = ("step", "loss", "val_loss", "lr", "grad_norm", "loss_scale", "skipped", "tokens",
               "step_seconds_max", "step_seconds_min", "bubble")
DATASETS_ND = ("phase_seconds", "peak_memory_bytes", "peak_memory_by_category",
               "predicted_memory_bytes")
ATTRS = ("config", "layout", "hostnames", "phases", "memory_categories", "flops_per_token",
         "parameters")
# Read when present: runs from before trident recorded them lack these.
OPTIONAL_ATTRS = ("threads_per_rank", "kokkos_backend", "blas", "blas_threads", "host_simd",
                  "git_revision", "cpu_model", "peak_lr", "slurm_job_id", "node_cpus", "moe_layers")
# Per-step datasets read when present: Mixture-of-Experts runs write the per-layer ones; runs
# since context parallelism write cp_bytes, runs since straggler scores straggler_score.
OPTIONAL_PER_STEP = ("moe_aux_loss", "moe_z_loss", "moe_dropped_fraction", "moe_layer_aux_loss",
                     "moe_layer_z_loss", "moe_layer_dropped_fraction", "moe_tokens_per_expert",
                     "cp_bytes", "straggler_score")
RUN_MARKERS = ("status", "run.json", "timings.h5", "trident.log")
REPEAT_SUFFIX = re.compile(r"_rep[0-9]+$")
BLAS_KERNEL = re.compile(r",?\s*kernel\s+(\S+)")
MIB = 1024.0 * 1024.0
DPI = 120


class AnalysisError(Exception):
    """A problem that ends the script: printed as `<script>: error: ...`, exit status 2."""


class RunProblem(Exception):
    """Why one run cannot be used (a warning, or an error under --strict)."""


def prog():
    return os.path.basename(sys.argv[0])


def warn(message):
    print(f"{prog()}: warning: {message}", file=sys.stderr)


def run_main(main):
    """Runs main() and turns an AnalysisError into the message and exit status 2."""
    try:
        return main()
    except AnalysisError as e:
        print(f"{prog()}: error: {e}", file=sys.stderr)
        return 2


def add_common_args(parser, paths_help="sweep directories, run directories or timings.h5 files",
                    warmup=True, metavar="PATH"):
    parser.add_argument("paths", nargs="+", metavar=metavar, help=paths_help)
    if warmup:
        parser.add_argument("--warmup", type=int, default=3, metavar="N",
                            help="leave out the first N steps of every run (default 3)")
    parser.add_argument("--out", metavar="DIR",
                        help="where to write the CSV, Markdown and PNG files (default: the first "
                             "sweep directory given, else the directory holding the runs)")
    parser.add_argument("--strict", action="store_true",
                        help="a failed, missing, unreadable or partial run is an error, not a "
                             "warning")
    parser.add_argument("--allow-mixed-provenance", action="store_true",
                        help="analyse runs that differ in git revision, BLAS (library or kernel) "
                             "or CPU model: a warning and a caveat on the figure instead of an "
                             "error")


def every_step_runs(doc, paths_help="sweep directories, run directories or timings.h5 files",
                    metavar="PATH"):
    """(args, runs) of a script that reads every step (no --warmup): its command line parsed with
    add_common_args and the runs loaded as load_runs does."""
    import argparse
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, paths_help=paths_help, warmup=False, metavar=metavar)
    args = ap.parse_args()
    return args, load_runs(args.paths, strict=args.strict, warmup=None,
                           allow_mixed_provenance=args.allow_mixed_provenance)


class Run:
    """One run: its directory, sweep, status, run.json, resolved config and timings arrays."""

    def __init__(self, run_dir, timings_path, sweep_dir, sweep):
        self.dir = run_dir
        self.name = os.path.basename(run_dir)
        self.timings_path = timings_path
        self.sweep_dir = sweep_dir
        self.sweep = sweep or {}
        self.status = None
        self.info = {}
        self.attrs = {}
        self.data = {}
        self.config = {}
        self.timed = None
        self.segments = []

    # -- resolved config --
    def cfg(self, dotted, default=None):
        node = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def ranks(self):
        return self.data["phase_seconds"].shape[1]

    @property
    def threads_per_rank(self):
        """Host threads of each rank (Kokkos' OpenMP pool, which also runs the GEMMs), from
        timings.h5; 1 for runs written before trident recorded it."""
        return as_int(self.attrs.get("threads_per_rank", 1))

    @property
    def nodes(self):
        """Nodes as the job placed the run (run.json), else the distinct hostnames of its ranks
        (several Slurm nodes can share one host, e.g. tools/local_slurm.sh's)."""
        if isinstance(self.info.get("nodes"), int):
            return self.info["nodes"]
        return len(set(h for h in self.attrs["hostnames"].split(",") if h))

    @property
    def phases(self):
        return self.attrs["phases"].split(",")

    @property
    def categories(self):
        return self.attrs["memory_categories"].split(",")

    @property
    def layout(self):
        return self.attrs["layout"]

    @property
    def base_name(self):
        """The layout's name without the repeat: run.json's "layout", else the directory name
        less a `_rep<k>` suffix."""
        layout = self.info.get("layout")
        if isinstance(layout, str) and layout:
            return layout
        return REPEAT_SUFFIX.sub("", os.path.basename(self.dir))

    @property
    def parameters(self):
        return as_int(self.attrs["parameters"])

    @property
    def flops_per_token(self):
        return float(self.attrs["flops_per_token"])

    def median_step_s(self):
        """Median over the timed steps of the slowest rank's step time."""
        return float(np.median(self.timed_values("step_seconds_max")))

    @property
    def provenance(self):
        """{field: value or None (unknown)} for the fields PROVENANCE_FIELDS compares."""
        sweep = self.sweep.get("provenance")
        sweep = sweep if isinstance(sweep, dict) else {}

        def known(*values):
            for v in values:
                if v is not None and str(v).strip() not in ("", "unknown"):
                    return str(v).strip()
            return None
        blas = known(self.attrs.get("blas"), sweep.get("blas"))
        m = BLAS_KERNEL.search(blas or "")
        revision = known(self.attrs.get("git_revision"), sweep.get("git_revision"))
        dirty = sweep.get("git_dirty")
        if revision and revision.endswith("-dirty"):
            revision, dirty = revision[:-len("-dirty")], True
        return {
            "git_revision": revision[:7].lower() if revision else None,
            "git_dirty": bool(dirty) if isinstance(dirty, bool) else None,
            "blas": BLAS_KERNEL.sub("", blas).strip(" ,") if blas else None,
            "blas_kernel": m.group(1) if m else known(sweep.get("blas_kernel")),
            "cpu_model": known(self.attrs.get("cpu_model"), sweep.get("cpu_model")),
        }

    def phase(self, name):
        """Seconds of one phase, [steps, ranks]."""
        return self.data["phase_seconds"][:, :, self.phases.index(name)]

    def select_timed(self, warmup):
        """Sets self.timed (bool per row): after `warmup` rows, and no checkpoint written."""
        rows = len(self.data["step"])
        io = self.phase("io").max(axis=1) if "io" in self.phases else np.zeros(rows)
        timed = (np.arange(rows) >= warmup) & (io == 0)
        if not timed.any():
            wrote = int((io[warmup:] > 0).sum())
            raise AnalysisError(
                f"{self.dir}: no timed steps: {rows} steps, the first {min(warmup, rows)} left "
                f"out as warm-up (--warmup {warmup}) and {wrote} of the rest wrote a checkpoint; "
                f"lower --warmup or run more steps")
        self.timed = timed

    def timed_values(self, name):
        return self.data[name][self.timed]


def _read_status(run_dir):
    path = os.path.join(run_dir, "status")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise AnalysisError(f"{path}: cannot read JSON: {e}") from None
    if not isinstance(value, dict):
        raise AnalysisError(f"{path}: expected a JSON object")
    return value


def _is_run_dir(path):
    return any(os.path.exists(os.path.join(path, m)) for m in RUN_MARKERS)


def _log_hint(run_dir):
    log = os.path.join(run_dir, "trident.log")
    return f" (see {log})" if os.path.isfile(log) else ""


def _load(run):
    """Fills run from disk; raises RunProblem when it cannot be used."""
    run.status = _read_status(run.dir)
    if run.status is not None and run.status != "completed":
        why = {"running": " (the job ended before the script recorded an outcome)",
               "timeout": " (stopped by RUN_TIMEOUT or the job's time limit)"}.get(run.status, "")
        raise RunProblem(f"status is '{run.status}'{why}{_log_hint(run.dir)}")
    info = os.path.join(run.dir, "run.json")
    if os.path.isfile(info):
        try:
            run.info = _read_json(info)
        except AnalysisError as e:
            raise RunProblem(str(e)) from None
    if not os.path.isfile(run.timings_path):
        raise RunProblem(f"no timings.h5{_log_hint(run.dir)}")
    # A run directory's every segment (resumed runs write timings.2.h5, ...); a file given by
    # name is that segment alone.
    whole_run = run.timings_path == os.path.join(run.dir, "timings.h5")
    run.segments = timings_segments(run.dir) if whole_run else [run.timings_path]
    segments = [_read_segment(path) for path in run.segments]
    run.attrs, data = segments[-1]
    if len(segments) > 1:
        data = _merge_segments(run.segments, [d for _, d in segments])
    run.data = data
    try:
        run.config = tomllib.loads(run.attrs["config"])
    except tomllib.TOMLDecodeError as e:
        raise RunProblem(f"timings.h5's config attribute is not TOML: {e}") from None
    steps = run.data["step"]
    want = run.cfg("run.steps")
    if len(steps) == 0:
        raise RunProblem(f"timings.h5 is partial: no steps recorded (run.steps = {want})"
                         f"{_log_hint(run.dir)}")
    if want is not None and int(steps[-1]) < int(want):
        raise RunProblem(f"timings.h5 is partial: {int(steps[-1])} of {want} steps recorded "
                         f"(killed?){_log_hint(run.dir)}")


SEGMENT_NAME = re.compile(r"timings(?:\.([0-9]+))?\.h5")
PER_STEP_ND = ("phase_seconds", "peak_memory_bytes", "peak_memory_by_category")


def timings_segments(run_dir):
    """The run's timings files in segment order: timings.h5, then timings.2.h5, timings.3.h5, ...
    (trident starts one per resume, never overwriting an earlier one)."""
    found = []
    for name in os.listdir(run_dir):
        m = SEGMENT_NAME.fullmatch(name)
        if m:
            found.append((int(m.group(1) or 1), os.path.join(run_dir, name)))
    return [path for _, path in sorted(found)]


def attr_value(value):
    """An HDF5 attribute as a Python str, int or float: strings may come back as str or bytes,
    numbers (threads_per_rank, parameters, flops_per_token, ...) as strings from older trident
    or as HDF5 numbers, possibly one-element arrays."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    if isinstance(value, bytes):  # np.bytes_ included
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (str, int, float, bool)):
        return str(value) if isinstance(value, str) else value
    return str(value)


def as_int(value):
    """int of an attribute written as a number or a string ("60096", "2.0", 60096, 2.0)."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return int(float(value))
    return int(value)


def _read_segment(path):
    """(attrs, datasets) of one timings file; RunProblem when it cannot be used."""
    name = os.path.basename(path)
    attrs, data = {}, {}
    try:
        with h5py.File(path, "r") as f:
            for key in ATTRS:
                if key not in f.attrs:
                    raise RunProblem(f"{name} lacks the attribute '{key}'")
                attrs[key] = attr_value(f.attrs[key])
            for key in OPTIONAL_ATTRS:
                if key in f.attrs:
                    attrs[key] = attr_value(f.attrs[key])
            for key in DATASETS_1D + DATASETS_ND:
                if key not in f:
                    raise RunProblem(f"{name} lacks the dataset '{key}'")
                data[key] = f[key][()]
            for key in OPTIONAL_PER_STEP:
                if key in f:
                    data[key] = f[key][()]
    except RunProblem:
        raise
    except Exception as e:  # h5py raises OSError, KeyError or RuntimeError on a damaged file
        raise RunProblem(f"{name} is unreadable (killed while writing?): "
                         f"{type(e).__name__}: {e}") from None
    rows = len(data["step"])
    for key in DATASETS_1D + PER_STEP_ND + tuple(k for k in OPTIONAL_PER_STEP if k in data):
        if data[key].shape[0] != rows:
            raise RunProblem(f"{name} is partial: '{key}' has {data[key].shape[0]} rows, "
                             f"'step' {rows}")
    return attrs, data


def _merge_segments(paths, segments):
    """One run's rows from its segments: a step recorded by several (a segment that resumed from
    a checkpoint older than the previous segment's last step redid it) comes from the latest."""
    ranks = {d["phase_seconds"].shape[1:] for d in segments}
    if len(ranks) > 1:
        raise RunProblem(f"its timings segments ({', '.join(map(os.path.basename, paths))}) ran on "
                         f"different rank counts (resumed with another layout); pass one "
                         f"segment's file to analyse it alone")
    keys = DATASETS_1D + PER_STEP_ND + tuple(
        k for k in OPTIONAL_PER_STEP if all(k in d for d in segments))
    merged = {k: np.concatenate([d[k] for d in segments]) for k in keys}
    latest = {}
    for row, step in enumerate(merged["step"]):
        latest[int(step)] = row
    rows = np.array([latest[step] for step in sorted(latest)], dtype=int)
    merged = {k: v[rows] for k, v in merged.items()}
    merged["predicted_memory_bytes"] = segments[-1]["predicted_memory_bytes"]
    return merged


def _discover(path):
    """(run_dir, timings_path, sweep_dir, sweep) for every run under one path."""
    if not os.path.exists(path):
        raise AnalysisError(f"{path}: no such file or directory")
    path = os.path.normpath(path)
    if os.path.isfile(path):
        run_dir = os.path.dirname(os.path.abspath(path))
        return [(run_dir, path, None, None)]
    sweep_json = os.path.join(path, "sweep.json")
    is_sweep = os.path.isfile(sweep_json)
    if not is_sweep and _is_run_dir(path):
        return [(path, os.path.join(path, "timings.h5"), None, None)]
    children = sorted(os.path.join(path, c) for c in os.listdir(path))
    run_dirs = [c for c in children if os.path.isdir(c) and _is_run_dir(c)]
    if not is_sweep and not run_dirs:
        raise AnalysisError(f"{path}: neither a sweep directory (sweep.json, run directories) nor "
                            f"a run directory ({', '.join(RUN_MARKERS)})")
    sweep = _read_json(sweep_json) if is_sweep else {}
    if not run_dirs:
        warn(f"{path}: sweep directory without run directories")
    return [(d, os.path.join(d, "timings.h5"), path, sweep) for d in run_dirs]


def load_runs(paths, strict=False, warmup=3, allow_mixed_provenance=False):
    """Every usable run under paths, in the order given (a sweep's runs sorted by name).

    warmup=None skips the choice of timed steps (for scripts that use every step). Runs of mixed
    provenance are an AnalysisError unless allow_mixed_provenance (then a warning)."""
    if warmup is not None and warmup < 0:
        raise AnalysisError(f"--warmup {warmup} must be >= 0")
    found, seen = [], set()
    for path in paths:
        for run_dir, timings, sweep_dir, sweep in _discover(path):
            key = os.path.realpath(timings)
            if key not in seen:
                seen.add(key)
                found.append(Run(run_dir, timings, sweep_dir, sweep))
    runs = []
    for run in found:
        try:
            _load(run)
        except RunProblem as e:
            if strict:
                raise AnalysisError(f"{run.dir}: {e}") from None
            warn(f"{run.dir}: {e}; left out")
            continue
        if warmup is not None:
            run.select_timed(warmup)
        runs.append(run)
    if not runs:
        raise AnalysisError(f"no usable runs in {' '.join(paths)}")
    # Runs from different sweeps may share a directory name: prefix the sweep's job id (or name).
    names = [r.name for r in runs]
    for run in runs:
        if names.count(run.name) > 1 and run.sweep_dir:
            run.name = f"{os.path.basename(run.sweep_dir)}/{run.name}"
    check_provenance(runs, allow_mixed_provenance)
    return runs


# ---- provenance ----

PROVENANCE_FIELDS = (("git_revision", "git revision"), ("git_dirty", "uncommitted changes"),
                     ("blas", "BLAS"), ("blas_kernel", "BLAS kernel"), ("cpu_model", "CPU model"))


def mixed_provenance(runs):
    """[(field label, {value: [runs]})] for each provenance field with more than one known value
    among runs (unknown values are left out: they differ from nothing)."""
    out = []
    for key, label in PROVENANCE_FIELDS:
        by_value = {}
        for r in runs:
            value = r.provenance[key]
            if value is not None:
                by_value.setdefault(value, []).append(r)
        if len(by_value) > 1:
            out.append((label, by_value))
    return out


def _where(subset, runs, short):
    """Names the runs of subset: a sweep whose every run is in it by the sweep, else each run."""
    parts = []
    for sweep in dict.fromkeys(r.sweep_dir for r in subset):
        mine = [r for r in subset if r.sweep_dir == sweep]
        if sweep and len(mine) == sum(1 for r in runs if r.sweep_dir == sweep):
            parts.append(f"sweep {os.path.basename(sweep) if short else sweep}")
        else:
            parts += [r.name if short else r.dir for r in mine]
    return ", ".join(parts)


def _show(value):
    if isinstance(value, bool):
        return "yes" if value else "no"
    return repr(value)


def describe_mixed(runs, short=False):
    """One line per differing field: `BLAS kernel: 'SkylakeX' (sweep A), 'Prescott' (sweep B)`."""
    return [f"{label}: " + "; ".join(f"{_show(v)} ({_where(rs, runs, short)})"
                                     for v, rs in by_value.items())
            for label, by_value in mixed_provenance(runs)]


def check_provenance(runs, allow_mixed=False):
    lines = describe_mixed(runs)
    if not lines:
        return
    text = "the runs differ in provenance, so their timings do not compare:\n  " + \
        "\n  ".join(lines)
    if not allow_mixed:
        raise AnalysisError(text + "\n  --allow-mixed-provenance analyses them anyway (a caveat "
                                   "goes on the figures)")
    warn(text.replace("do not compare", "may not compare") + "\n  (--allow-mixed-provenance: "
         "analysed anyway, with a caveat on the figures)")


def provenance_caveats(runs):
    """The figure's caveat lines for mixed provenance (empty when the runs agree)."""
    return [f"mixed provenance, {line}" for line in describe_mixed(runs, short=True)]


# ---- repeats ----

class Group:
    """Repeats of one measurement: runs with the same layout name, ranks, threads, nodes and
    config (run.name, run.out_dir aside). label: the layout name, prefixed by the sweeps' names
    where two groups would share one."""

    def __init__(self, runs):
        self.runs = runs
        self.label = runs[0].base_name

    @property
    def first(self):
        return self.runs[0]

    @property
    def repeats(self):
        return len(self.runs)

    @property
    def sweeps(self):
        return "+".join(dict.fromkeys(os.path.basename(r.sweep_dir) for r in self.runs
                                      if r.sweep_dir))

    @property
    def run_dirs(self):
        return ";".join(r.dir for r in self.runs)

    def spread(self, per_run):
        """(median, min, max) over the repeats of per_run(run)."""
        values = np.array([per_run(r) for r in self.runs], dtype=float)
        return float(np.median(values)), float(values.min()), float(values.max())


# ---- drift: ranks or repeats that computed at different speeds ----

STRAGGLER_SCORE = 0.75  # trident's threshold (train/straggler_scores.hpp)
REPEAT_DRIFT = 0.10     # repeats whose median compute seconds differ by more than this


def slow_ranks(run):
    """{rank: median straggler score over the timed steps} of the ranks under STRAGGLER_SCORE
    (empty for runs from before trident recorded scores)."""
    if "straggler_score" not in run.data:
        return {}
    scores = run.data["straggler_score"][run.timed]
    judged = ~np.isnan(scores).all(axis=0)
    medians = np.full(scores.shape[1], np.nan)
    medians[judged] = np.nanmedian(scores[:, judged], axis=0)
    return {int(r): float(m) for r, m in enumerate(medians) if m < STRAGGLER_SCORE}


def compute_seconds(run):
    """The median over timed steps of the slowest rank's compute-phase seconds (wall)."""
    names = [p for p in ("forward", "backward", "recompute", "weight_grad", "optimizer")
             if p in run.phases]
    per_rank = sum(run.phase(p) for p in names)[run.timed]
    return float(np.median(per_rank.max(axis=1)))


def drift_note(group):
    """What drifted in a group of repeats: ranks scored as stragglers, and repeats whose compute
    differs by more than REPEAT_DRIFT (a loaded or throttled machine); "" when nothing did."""
    notes = []
    for i, r in enumerate(group.runs):
        slow = slow_ranks(r)
        if slow:
            which = ", ".join(f"rank {k} {v:.2f}" for k, v in sorted(slow.items()))
            notes.append(f"{'repeat ' + str(i + 1) + ': ' if group.repeats > 1 else ''}"
                         f"slow {which}")
    if group.repeats > 1:
        seconds = [compute_seconds(r) for r in group.runs]
        spread = max(seconds) / min(seconds) - 1 if min(seconds) > 0 else 0.0
        if spread > REPEAT_DRIFT:
            notes.append(f"repeats' compute {100 * spread:.0f}% apart")
    return "; ".join(notes)


def repeats_note(counts, value="step time", point="point"):
    """A figure's note on what its points and error bars are, from the rows' repeat counts."""
    counts = sorted(set(int(n) for n in counts))
    if counts == [1]:
        return f"one run per {point} (no repeats), so no error bars"
    shown = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return (f"{point}s: median over {shown} repeats of each run's median {value}; error bars: "
            f"min-max over the repeats")


def repeat_key(run):
    flat = flat_config(run.config)
    config = tuple(sorted((k, repr(v)) for k, v in flat.items()
                          if k not in ("run.name", "run.out_dir")))
    return (run.base_name, run.ranks, run.threads_per_rank, run.nodes, config)


def group_runs(runs):
    """The runs as Groups of repeats, in the order of each group's first run."""
    groups = {}
    for r in runs:
        groups.setdefault(repeat_key(r), []).append(r)
    out = [Group(rs) for rs in groups.values()]
    labels = [g.label for g in out]
    for g in out:
        if labels.count(g.label) > 1 and g.sweeps:
            g.label = f"{g.sweeps}/{g.label}"
    labels = [g.label for g in out]
    for g in out:  # same name and sweeps, different config: numbered
        if labels.count(g.label) > 1:
            g.label = f"{g.label} #{sum(1 for h in out[:out.index(g) + 1] if h.label == g.label)}"
    return out


def sweep_dirs(runs):
    out = []
    for run in runs:
        if run.sweep_dir and run.sweep_dir not in out:
            out.append(run.sweep_dir)
    return out


def output_dir(out, runs):
    """--out, else the first sweep directory, else the directory holding the runs; created."""
    if out is None:
        sweeps = sweep_dirs(runs)
        if sweeps:
            out = sweeps[0]
        else:
            out = os.path.commonpath([os.path.dirname(os.path.abspath(r.dir)) for r in runs])
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise AnalysisError(f"--out {out}: {e.strerror}") from None
    return out


# ---- configs ----

def flat_config(config, prefix=""):
    """{"section.key": value} for a nested config."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, name + "."))
        else:
            out[name] = value
    return out


def differing_keys(runs, ignore=("run.name", "run.out_dir")):
    """Config keys whose value is not the same in every run, in config order."""
    flats = [flat_config(r.config) for r in runs]
    keys = []
    for flat in flats:
        keys += [k for k in flat if k not in keys and k not in ignore]
    return [k for k in keys if len({repr(f.get(k)) for f in flats}) > 1]


# ---- output ----

def _cell(value, fmt):
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if fmt is not None and isinstance(value, (int, float, np.integer, np.floating)):
        return format(value, fmt)
    if isinstance(value, (float, np.floating)):
        return format(value, ".4g")
    return str(value).replace("|", "\\|")


def markdown(df, formats=None):
    """A GitHub Markdown table of df; numeric columns right-aligned, formats {column: spec}."""
    formats = formats or {}
    cols = list(df.columns)
    numeric = [np.issubdtype(df[c].dtype, np.number) for c in cols]
    lines = ["| " + " | ".join(str(c) for c in cols) + " |",
             "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, formats.get(c)) for c, v in zip(cols, row)) + " |")
    return "\n".join(lines) + "\n"


def command_line():
    """The command that ran this script, interpreter included, as a shell line to paste."""
    return " ".join(shlex.quote(word) for word in [sys.executable] + sys.argv)


def write_table(df, out_dir, stem, md_df=None, formats=None):
    """Writes out_dir/stem.csv (df, full precision) and out_dir/stem.md (md_df or df, then the
    command that made it); returns the Markdown table."""
    df.to_csv(os.path.join(out_dir, stem + ".csv"), index=False)
    text = markdown(df if md_df is None else md_df, formats)
    with open(os.path.join(out_dir, stem + ".md"), "w", encoding="utf-8") as f:
        f.write(text)
        f.write(f"\nMade by `{command_line()}`\n")
    return text


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _values(items):
    """' / '.join of the distinct values in order, None when there are none."""
    distinct = [str(v) for v in dict.fromkeys(v for v in items if v not in (None, ""))]
    return " / ".join(distinct) if distinct else None


def caption(runs):
    """One line for a figure: config, hardware (CPU, cores, threads, BLAS kernel), job id and git
    revision of the runs."""
    configs = _values(os.path.basename(c) for r in runs
                      for c in str(r.sweep.get("config", "")).split())
    prov = [r.provenance for r in runs]
    cores = _values((r.sweep.get("provenance") or {}).get("cores_per_node")
                    if isinstance(r.sweep.get("provenance"), dict) else None for r in runs)
    threads = _values(r.threads_per_rank for r in runs)
    kernel = _values(p["blas_kernel"] for p in prov)
    blas = _values(p["blas"] for p in prov)
    hardware = _values(p["cpu_model"] for p in prov) or "unknown CPU"
    if cores:
        hardware += f", {cores} cores/node"
    hardware += f", {threads} thread{'s' if threads != '1' else ''}/rank"
    if blas or kernel:
        hardware += f", {blas or 'BLAS'}" + (f" kernel {kernel}" if kernel else "")
    jobs = _values(r.sweep.get("job_id") for r in runs)
    revisions = _values(p["git_revision"] + ("+dirty" if p["git_dirty"] else "")
                        for p in prov if p["git_revision"])
    return " | ".join([f"config {configs or 'unknown'}", hardware,
                       f"job {jobs}" if jobs else "no job id",
                       f"git {revisions or 'unknown'}"])


def plain_ticks(ax, axis, values):
    """Plain-number tick labels on a log axis (1, 2, 5 x 10^k, or 1..9 x 10^k when the data span
    less than that gives), no minor labels; limits a little beyond the data."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    values = np.asarray([v for v in values if np.isfinite(v) and v > 0], dtype=float)
    if not len(values):
        return
    lo, hi = values.min() / 1.25, values.max() * 1.25
    ticks = []
    for subs in ((1, 2, 5), tuple(range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(int(np.floor(np.log10(lo))),
                                               int(np.ceil(np.log10(hi))) + 1)
                 for m in subs if lo <= m * 10.0 ** e <= hi]
        if len(ticks) >= 3:
            break
    which = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_ylim if axis == "y" else ax.set_xlim)(lo, hi)
    which.set_major_locator(FixedLocator(ticks))
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    which.set_minor_formatter(NullFormatter())


def rank_ticks(ax, ranks):
    """A log2 x axis with one plain tick per rank count and no minor ticks."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(int(n) for n in ranks))))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(ranks), max(ranks)
    ax.set_xlim(lo / 1.4, hi * 1.4)


def human(n):
    """60096 -> '60.1K', 1.3e9 -> '1.3B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:g}"


def _notes_below(fig, lines):
    """Writes (text, colour) lines under everything already drawn, wrapped to the figure's
    width."""
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches
    w, h = fig.get_size_inches()
    size = 7.5
    width = max(40, int(box.width * 72 / (size * 0.5)))
    y = box.y0 - 0.06
    for text, color in lines:
        wrapped = "\n".join(textwrap.wrap(text, width, subsequent_indent="  "))
        # Figure fractions, not inches: savefig's tight crop moves transFigure, not
        # dpi_scale_trans.
        t = fig.text(box.x0 / w, y / h, wrapped, ha="left", va="top", fontsize=size, color=color)
        y = t.get_window_extent(renderer).y0 / fig.dpi - 0.03


def node_cpus(run):
    """CPUs the run's ranks on a node could run on: timings.h5's node_cpus, else the sweep's
    provenance cores_per_node; None when neither says."""
    if "node_cpus" in run.attrs:
        return int(float(run.attrs["node_cpus"]))
    prov = run.sweep.get("provenance")
    if isinstance(prov, dict) and isinstance(prov.get("cores_per_node"), int):
        return prov["cores_per_node"]
    return None


def oversubscription_caveats(runs):
    """The figure's caveat when some runs put more threads on a node (ranks per node x threads
    per rank) than it had CPUs: their times include time-sharing, not only the layout's cost."""
    over = []
    for r in runs:
        cpus = node_cpus(r)
        per_node = -(-r.ranks // max(r.nodes, 1)) * r.threads_per_rank
        if cpus and per_node > cpus and r.base_name not in [o[0] for o in over]:
            over.append((r.base_name, per_node, cpus))
    if not over:
        return []
    shown = ", ".join(f"{name} ({threads} threads on {cpus} CPUs)" for name, threads, cpus in over)
    return [f"oversubscribed: {shown} per node; their times include the threads taking turns on "
            f"the cores, not only the layout's own cost"]


def save_figure(fig, out_dir, name, runs=None, caveats=(), notes=(), oversubscription=True):
    """Writes the figure; with runs, the notes, the caveats (oversubscribed nodes unless the
    caller words its own, and mixed provenance) and a caption line go underneath."""
    lines = []
    if runs is not None:
        fig.set_dpi(DPI)  # lay the notes out at the resolution they are saved at
        fig.canvas.draw()
        lines = [(n, "black") for n in notes]
        caveats = list(caveats) + (oversubscription_caveats(runs) if oversubscription else [])
        lines += [(f"caveat: {c}", "firebrick") for c in caveats + provenance_caveats(runs)]
        lines.append((caption(runs), "dimgrey"))
        _notes_below(fig, lines)
    path = os.path.join(out_dir, name)
    # The notes go into the PNG's Description too (tests and tools read them there).
    fig.savefig(path, dpi=DPI, bbox_inches="tight",
                metadata={"Description": "\n".join(text for text, _ in lines)})
    pyplot().close(fig)
    return path
