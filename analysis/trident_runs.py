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
"""
import json
import os
import re
import sys

import h5py
import numpy as np

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
OPTIONAL_ATTRS = ("threads_per_rank", "kokkos_backend", "blas", "blas_threads", "host_simd")
RUN_MARKERS = ("status", "run.json", "timings.h5", "trident.log")
MIB = 1024.0 * 1024.0


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
        return int(self.attrs.get("threads_per_rank", 1))

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


def _read_segment(path):
    """(attrs, datasets) of one timings file; RunProblem when it cannot be used."""
    name = os.path.basename(path)
    attrs, data = {}, {}
    try:
        with h5py.File(path, "r") as f:
            for key in ATTRS:
                if key not in f.attrs:
                    raise RunProblem(f"{name} lacks the attribute '{key}'")
                value = f.attrs[key]
                attrs[key] = value.decode() if isinstance(value, bytes) else str(value)
            for key in OPTIONAL_ATTRS:
                if key in f.attrs:
                    value = f.attrs[key]
                    attrs[key] = value.decode() if isinstance(value, bytes) else str(value)
            for key in DATASETS_1D + DATASETS_ND:
                if key not in f:
                    raise RunProblem(f"{name} lacks the dataset '{key}'")
                data[key] = f[key][()]
    except RunProblem:
        raise
    except Exception as e:  # h5py raises OSError, KeyError or RuntimeError on a damaged file
        raise RunProblem(f"{name} is unreadable (killed while writing?): "
                         f"{type(e).__name__}: {e}") from None
    rows = len(data["step"])
    for key in DATASETS_1D + PER_STEP_ND:
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
    merged = {k: np.concatenate([d[k] for d in segments]) for k in DATASETS_1D + PER_STEP_ND}
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


def load_runs(paths, strict=False, warmup=3):
    """Every usable run under paths, in the order given (a sweep's runs sorted by name).

    warmup=None skips the choice of timed steps (for scripts that use every step)."""
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
    return runs


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


def write_table(df, out_dir, stem, md_df=None, formats=None):
    """Writes out_dir/stem.csv (df, full precision) and out_dir/stem.md (md_df or df); returns
    the Markdown text."""
    df.to_csv(os.path.join(out_dir, stem + ".csv"), index=False)
    text = markdown(df if md_df is None else md_df, formats)
    with open(os.path.join(out_dir, stem + ".md"), "w", encoding="utf-8") as f:
        f.write(text)
    return text


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    pyplot().close(fig)
    return path
