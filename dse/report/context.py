"""From a results file to a report: rebuild the study, evaluate what the figures compare against.

The orchestration between :mod:`dse.results.analysis` (which reads results) and :mod:`.page`
(which draws the figures and writes the page): the study is rebuilt from the results' own
metadata, so a report needs nothing but the Parquet file. Everything here re-evaluates designs
with the same vectorised model the search used (:func:`dse.evaluation.designs.evaluate_study`),
so the reference points and curves share the results' columns and units.

- :func:`study_from_results`: the StudySpec behind a results frame.
- :func:`known_parts`: real devices on the study's workload, each at the fewest chips that fit.
- :func:`speedup_vs_batch`: speculative speedup against batch size for a few front designs.
- :func:`importances`: PED-ANOVA importance of each searched knob, per objective.
- :func:`build_report`: all of the above, then :func:`.page.write_report`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DseError, SpecError
from ..evaluation.designs import evaluate_study
from ..results import analysis as da
from ..results.frame import results_frame
from ..results.guard import check_report_folder, report_mark, write_report_mark
from ..study import Knob, StudySpec, load_study, open_study, parse_study
from ..study.space import is_conditional
from .rows import design_label, row_params

DEVICES = ("h100-sxm", "h200", "b200", "mi300x")
CHIPS = (1, 2, 4, 8)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: fewest feasible rows for importances (PED-ANOVA keeps the top 10%: at least 2 trials)
MIN_IMPORTANCE_ROWS = 20
_WORKLOAD_NAMES = ("batch", "prompt_tokens", "output_tokens", "tree_nodes", "draft", "draft_exit_layer")
_SCALAR_WORKLOAD = ("target", "draft", "dtype", "kv_dtype", "temperature", "acceptance", "overlap",
                    "tree_nodes", "runtime", "k_max", "continuous", "task", "sla", "serving", "max_batched_tokens",
                    "tree")


# --------------------------------------------------------------------------- the study

def _knob_section(name: str) -> tuple[str, str]:
    """A resolved knob name -> (study-file section, key): batch -> (workload, batch), ..."""
    if name in _WORKLOAD_NAMES:
        return "workload", name
    if name == "k":
        return "k", "k"
    for section in ("target_chip", "draft_chip"):
        if name.startswith(section + "_"):
            return section, name.removeprefix(section + "_")
    raise DseError(f"results metadata: knob {name!r} belongs to no study section")


def study_mapping(resolved: dict) -> dict:
    """``StudySpec.resolved()`` (as stored in results) -> the mapping of a study file."""
    workload = resolved.get("workload") or {}
    wl = {k: workload[k] for k in _SCALAR_WORKLOAD if k in workload and workload[k] is not None}
    space: dict = {}
    for name, value in (resolved.get("knobs") or {}).items():
        section, key = _knob_section(name)
        if section == "workload":
            wl[key] = value
        elif section == "k":
            if isinstance(value, (list, dict)):
                space["k"] = value
            else:
                wl["k"] = value
        else:
            space.setdefault(section, {})[key] = value
    exit_layer = wl.pop("draft_exit_layer", None)       # the early-exit range of a draft list
    if exit_layer is not None and isinstance(wl.get("draft"), list):
        wl["draft"] = [{"early-exit": exit_layer} if d == "early-exit" else d for d in wl["draft"]]
    out = {k: resolved[k] for k in ("name", "description", "objectives", "constraints", "search", "grid",
                                    "output", "storage", "technology") if resolved.get(k) is not None}
    if isinstance(out.get("technology"), dict):       # results written before the _gib names (schema < 4)
        out["technology"] = _renamed_technology(out["technology"])
    return {**out, "workload": wl, "space": space}


def _renamed_technology(tech: dict) -> dict:
    """Technology overrides with the memory fields' old names (gb_per_layer, ..., which held GiB) under
    their new ones (dse.catalog.technology.RENAMED): the same values, the same meaning."""
    from ..catalog.technology import RENAMED
    memory = tech.get("memory")
    if not isinstance(memory, dict):
        return tech
    return {**tech, "memory": {name: ({RENAMED.get(k, k): v for k, v in entry.items()} if isinstance(entry, dict)
                                      else entry) for name, entry in memory.items()}}


def study_from_mapping(mapping: dict, db=None, source: str = "results metadata") -> StudySpec:
    """Validate a study-file mapping with :func:`dse.study.parse_study` (no file involved)."""
    return parse_study(mapping, source, db=db)


def _same(a: dict, b: dict) -> bool:
    def norm(d):
        return json.loads(json.dumps({k: v for k, v in d.items() if k != "file"}, default=str))
    return norm(a) == norm(b)


def _from_file(resolved: dict, db) -> StudySpec | None:
    """The original study file, if it still exists and still resolves to the same study."""
    file = resolved.get("file")
    if not file or not Path(file).is_file():
        return None
    try:
        study = load_study(file, db=db)
    except (SpecError, DseError):
        return None
    return study if study.name == resolved.get("name") and _same(study.resolved(), resolved) else None


def study_from_results(df: pd.DataFrame, db=None) -> StudySpec:
    """The StudySpec behind results: the study file if unchanged, else rebuilt from metadata."""
    resolved = (df.attrs.get("dse") or {}).get("study")
    if not isinstance(resolved, dict) or "knobs" not in resolved:
        raise DseError("the results carry no study in attrs['dse']['study']; load them with "
                       "dse.results.analysis.load_results")
    study = _from_file(resolved, db)
    if study is not None:
        return study
    try:
        return study_from_mapping(study_mapping(resolved), db=db)
    except SpecError as exc:
        raise DseError(f"cannot rebuild the study {resolved.get('name')!r} from the results "
                       f"metadata (and {resolved.get('file')!r} is missing or changed): {exc}") from exc


def _evaluate(study: StudySpec, params: dict[str, np.ndarray], n: int) -> pd.DataFrame:
    """Knob arrays -> a results frame (no Pareto flags)."""
    _, db, tech = open_study(study)
    designs, metrics = evaluate_study(study, params, n, db, tech)
    return results_frame(study, designs, metrics, params, trial=np.arange(n), sampler="", seed=None,
                         pareto=False)


# --------------------------------------------------------------------------- known parts

#: workload knobs a known part is evaluated over when the study searches them, keeping its best: the
#: choices a deployment makes (which draft, its exit layer and tree size, how many sequences a step)
SERVING_KNOBS = ("draft", "draft_exit_layer", "tree_nodes", "batch")
#: values of a serving knob given as a range: every value up to this many, else this many spread over it
RANGE_POINTS = 5


def _serving_values(k: Knob) -> tuple:
    """A searched serving knob's values: its choices, or ``RANGE_POINTS`` of its range (geometric for
    a log range), on its step."""
    if k.choices:
        return tuple(k.choices)
    lo, hi, step = int(k.low), int(k.high), int(k.step or 1)
    every = range(lo, hi + 1, step)
    if len(every) <= RANGE_POINTS:
        return tuple(every)
    raw = np.geomspace(lo, hi, RANGE_POINTS) if k.log else np.linspace(lo, hi, RANGE_POINTS)
    return tuple(sorted({lo + step * int(round((x - lo) / step)) for x in raw}))


def _fixed_workload(study: StudySpec) -> tuple[list[Knob], list[str], dict[str, tuple]]:
    """The study's workload knobs and k, each fixed (the first value of a searched one, with a note)
    but the searched serving knobs (SERVING_KNOBS), returned apart with their values."""
    knobs, notes, serving = [], [], {}
    for k in study.knobs:
        if k.section not in ("workload", "k"):
            continue
        if k.searched and k.name == "k":
            notes.append("k auto (searched in the study)")
            continue
        if k.searched and k.name in SERVING_KNOBS:
            serving[k.name] = _serving_values(k)
            continue
        if k.searched:
            value = k.choices[0] if k.choices else (int(k.low) if k.kind == "int" else k.low)
            notes.append(f"{k.name} = {value} (searched in the study: its first value)")
            k = Knob(k.name, k.section, k.key, k.kind, fixed=value)
        knobs.append(k)
    return knobs, notes, serving


def _combos(study: StudySpec, serving: dict[str, tuple]) -> list[dict]:
    """Every combination of the serving knobs' values, a knob that does not act on it (the exit
    layer but for the early-exit range, a tree size without a draft) at its first value, once."""
    out, seen = [], set()
    for values in itertools.product(*serving.values()):
        c = dict(zip(serving, values))
        if "draft" in c and study.drafts is not None:
            if c["draft"] != "early-exit" and "draft_exit_layer" in c:
                c["draft_exit_layer"] = serving["draft_exit_layer"][0]
            if study.drafts.kind(c["draft"]) == "none" and "tree_nodes" in c:
                c["tree_nodes"] = serving["tree_nodes"][0]
        key = tuple(c.values())
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _runs(row: pd.Series, serving: dict[str, tuple], study: StudySpec) -> str:
    """What a known part runs where the study searches serving knobs: 'eagle3 (k 6, a tree of 59
    nodes), batch 1', 'early exit at layer 16 (a chain of 3), batch 8', 'no draft, batch 128'."""
    draft = str(row["params_draft"]) if "draft" in serving else study.drafter.label
    if draft == "none":
        bits = ["no draft"]
    else:
        name = f"early exit at layer {int(row['params_draft_exit_layer'])}" if draft == "early-exit" else draft
        k, nodes = int(row["k"]) if pd.notna(row["k"]) else 0, int(row["tree_nodes"]) if pd.notna(row["tree_nodes"]) else 0
        how = "speculation off" if not k else f"k {k}, a tree of {nodes} nodes" if nodes else f"a chain of {k}"
        bits = [f"{name} ({how})"]
    if "batch" in serving:
        bits.append(f"batch {int(row['params_batch'])}")
    return ", ".join(bits)


def known_parts(study: StudySpec, devices=DEVICES, chips=CHIPS) -> pd.DataFrame:
    """Each device on the study's workload at the fewest of ``chips`` that fit (else the most).

    Where the study searches its draft, exit layer, tree size or batch (SERVING_KNOBS), each device
    runs every combination of their values (a range: RANGE_POINTS of it) and keeps the one with the
    best first objective among its feasible rows (else those that fit), each at its fewest chips:
    a known part serves the study's workload as well as the study lets it, not at the first value
    of each knob. ``runs`` says what it runs then ('eagle3 (k 6, a tree of 59 nodes), batch 1'; ''
    when the study searches none of them). Other searched workload knobs take their first value
    (``note`` says which).

    Columns: ``name`` ("h100-sxm x2"), ``device``, ``runs``, ``note``, then the results columns
    (``params_target_chip_device``, ``params_target_chip_chips``, hardware, metrics, ``fits``,
    ``feasible`` under the study's constraints). The draft runs on the target chips.
    """
    devices, chips = tuple(devices), tuple(sorted(int(c) for c in chips))
    workload, notes, serving = _fixed_workload(study)
    combos = _combos(study, serving) if serving else [{}]
    per_device = len(combos) * len(chips)
    knobs = (*workload, *(Knob(name, "workload", name, "cat" if name == "draft" else "int", choices=vals)
                          for name, vals in serving.items()),
             Knob("target_chip_device", "target_chip", "device", "cat", choices=devices),
             Knob("target_chip_chips", "target_chip", "chips", "int", choices=chips))
    params = {"target_chip_device": np.repeat(np.array(devices, dtype=object), per_device),
              "target_chip_chips": np.tile(np.array(chips, dtype=np.int64), len(devices) * len(combos))}
    for name in serving:
        col = np.array([c[name] for c in combos], dtype=object if name == "draft" else np.int64)
        params[name] = np.tile(np.repeat(col, len(chips)), len(devices))
    ep = next((int(k.fixed) for k in workload if k.name == "ep"), study.workload.ep)
    if ep > 1:      # each part at gcd(ep, chips) expert ranks (roofline.expert_ranks), an ep its chips can take
        params["ep"] = np.gcd(ep, params["target_chip_chips"])
        knobs = (*(k for k in knobs if k.name != "ep"),
                 Knob("ep", "workload", "ep", "int", choices=tuple(sorted(set(params["ep"].tolist())))))
    kstudy = dataclasses.replace(study, knobs=knobs)
    df = _evaluate(kstudy, params, len(devices) * per_device)
    df["_combo"] = np.tile(np.repeat(np.arange(len(combos)), len(chips)), len(devices))
    keep = [_fewest_fitting(g) for _, g in df.groupby(["params_target_chip_device", "_combo"], sort=False)]
    out = df.loc[keep]
    if len(combos) > 1:
        out = out.loc[[_best(g, study) for _, g in out.groupby("params_target_chip_device", sort=False)]]
    out = out.drop(columns="_combo").reset_index(drop=True)
    dev = out["params_target_chip_device"].astype(str)
    runs = [_runs(r, serving, study) for _, r in out.iterrows()] if serving else [""] * len(out)
    out.insert(0, "note", pd.array(["; ".join(notes)] * len(out), dtype="string"))
    out.insert(0, "runs", pd.array(runs, dtype="string"))
    out.insert(0, "device", pd.array(dev, dtype="string"))
    out.insert(0, "name", pd.array(dev + " x" + out["chips"].astype(str), dtype="string"))
    return out


def _best(g: pd.DataFrame, study: StudySpec):
    """Index of the row of ``g`` (one device, one row per serving combination) with the best first
    objective among the feasible rows, else among those that fit, else the first; the earlier of equals."""
    o = study.objectives[0]
    v = pd.to_numeric(g[o.metric], errors="coerce").to_numpy(np.float64)
    v = np.where(np.isnan(v), np.inf, v if o.direction == "minimize" else -v)
    rank = np.lexsort((np.arange(len(g)), v, ~g["fits"].to_numpy(bool), ~g["feasible"].to_numpy(bool)))
    return g.index[rank[0]]


def _fewest_fitting(g: pd.DataFrame):
    """Index of the row with the fewest chips that fits, else of the most chips."""
    g = g.sort_values("chips", kind="stable")
    fit = g.index[g["fits"].to_numpy(dtype=bool)]
    return fit[0] if len(fit) else g.index[-1]


# --------------------------------------------------------------------------- speedup vs batch

def _pick_designs(study: StudySpec, front_df: pd.DataFrame, limit: int) -> list[tuple[object, str]]:
    """(index, label) of up to ``limit`` rows: the best by each objective, then by the first."""
    picks: dict = {}
    for o in study.objectives:
        col = pd.to_numeric(front_df[o.metric], errors="coerce")
        if col.notna().any():
            picks.setdefault(col.idxmin() if o.direction == "minimize" else col.idxmax(), f"best {short_metric(o.metric)}")
    first = study.objectives[0]
    for i in front_df.sort_values(first.metric, ascending=first.direction == "minimize", kind="stable").index:
        picks.setdefault(i, "")

    chosen = list(picks.items())[:limit]
    names = [design_label(front_df.loc[i]) for i, _ in chosen]
    out = []
    for (i, role), name in zip(chosen, names, strict=True):
        if names.count(name) > 1:       # two designs the label's knobs do not tell apart: name the trial
            name += f", trial {front_df.loc[i, 'trial'] if 'trial' in front_df.columns else i}"
        out.append((i, f"{name} ({role})" if role else name))
    return out


def short_metric(metric: str) -> str:
    """spec_ms_per_token -> latency, cost_usd -> cost; other metrics keep their name."""
    return {"spec_ms_per_token": "latency", "cost_usd": "cost", "power_w": "power",
            "total_die_area_mm2": "area", "tokens_per_s": "throughput",
            "energy_j_per_token": "energy"}.get(metric, metric)


def _distinct_curves(df: pd.DataFrame, n_batches: int, top: int) -> pd.DataFrame:
    """The first ``top`` designs (blocks of ``n_batches`` rows) whose curves differ: knobs that
    do not matter (a draft-chip device with the draft chip off) make identical designs."""
    keep, seen = [], set()
    for start in range(0, len(df), n_batches):
        block = df.iloc[start:start + n_batches]
        key = np.round(block[["spec_ms_per_token", "speedup"]].to_numpy(np.float64), 9).tobytes()
        if key not in seen and len(keep) < top:
            seen.add(key)
            keep.append(block)
    return pd.concat(keep, ignore_index=True)


def speedup_vs_batch(study: StudySpec, front_df: pd.DataFrame, batches=BATCHES, top: int = 4) -> pd.DataFrame:
    """Speedup of up to ``top`` distinct front designs re-evaluated at each batch size.

    Every other knob is the design's own; with ``k: auto`` k is re-chosen per batch.
    Columns: ``design``, ``trial``, ``batch``, ``speedup``, ``spec_ms_per_token``, ``k``,
    ``fits`` (metrics are NaN where the KV cache no longer fits).
    """
    cols = ["design", "trial", "batch", "speedup", "spec_ms_per_token", "k", "fits"]
    picks = _pick_designs(study, front_df, 4 * top) if len(front_df) and top > 0 else []
    if not picks:
        return pd.DataFrame(columns=cols)
    batches = tuple(int(b) for b in batches)
    rows = front_df.loc[[i for i, _ in picks]]
    params = row_params(study, rows, len(batches), skip="batch")
    params["batch"] = np.tile(np.array(batches, dtype=np.int64), len(picks))
    knobs = tuple(k for k in study.knobs if k.name != "batch") + (
        Knob("batch", "workload", "batch", "int", choices=batches),)
    df = _evaluate(dataclasses.replace(study, knobs=knobs), params, len(picks) * len(batches))
    df["design"] = np.repeat([label for _, label in picks], len(batches))
    trials = rows["trial"].to_numpy() if "trial" in rows.columns else np.asarray(rows.index)
    df["trial"] = np.repeat(trials, len(batches))
    df["batch"] = params["batch"]
    return _distinct_curves(df[cols], len(batches), top)


# --------------------------------------------------------------------------- importances

def _trial_params(study: StudySpec, row) -> dict:
    """One row's params_* values in the types the Optuna distributions expect."""
    out = {}
    for k in study.searched:
        v = row[f"params_{k.name}"]
        if pd.isna(v):          # an inactive knob (dse.study.space): not a parameter of this trial
            continue
        if k.choices:
            out[k.name] = {str(c): c for c in k.choices}[str(v)]
        else:
            out[k.name] = int(v) if k.kind == "int" else float(v)
    return out


def _optuna_study(df: pd.DataFrame, study: StudySpec):
    """An in-memory Optuna study holding ``df``'s rows as COMPLETE trials."""
    import optuna

    from ..search.sampler_setup import distributions
    dists = distributions(study)
    metrics = [o.metric for o in study.objectives]
    s = optuna.create_study(directions=[o.direction for o in study.objectives])
    trials = []
    for _, row in df.iterrows():
        params = _trial_params(study, row)
        trials.append(optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params},
                                                values=[float(row[m]) for m in metrics]))
    s.add_trials(trials)
    return s


def _usable_rows(df: pd.DataFrame, study: StudySpec) -> pd.DataFrame:
    """Feasible COMPLETE rows with finite objectives and every searched param present (or
    inactive, dse.study.space)."""
    metrics = [o.metric for o in study.objectives]
    ok = da.feasible_mask(df) & np.isfinite(df[metrics].to_numpy(np.float64, na_value=np.nan)).all(axis=1)
    if "state" in df.columns:
        ok &= (df["state"] == "COMPLETE").fillna(False).to_numpy(dtype=bool)
    pcols = [f"params_{k.name}" for k in study.searched if not is_conditional(k)]
    ok &= df[pcols].notna().all(axis=1).to_numpy(dtype=bool)
    return df[ok]


def importances(df: pd.DataFrame, study: StudySpec, min_rows: int | None = None) -> dict:
    """``{objective: {knob: importance}}`` by PED-ANOVA over the feasible rows (each sums to 1).

    Empty when fewer than ``min_rows`` (default :data:`MIN_IMPORTANCE_ROWS`) feasible rows,
    one searched knob, or Optuna fails (with a warning). Maximised objectives are negated
    (PED-ANOVA assumes lower is better).
    """
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
    rows = _usable_rows(df, study)
    if len(study.searched) < 2 or len(rows) < (MIN_IMPORTANCE_ROWS if min_rows is None else min_rows):
        return {}
    out, verbosity = {}, optuna.logging.get_verbosity()
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)    # no "A new study created" line
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = _optuna_study(rows, study)
            for i, o in enumerate(study.objectives):
                sign = 1.0 if o.direction == "minimize" else -1.0
                imp = get_param_importances(s, evaluator=PedAnovaImportanceEvaluator(), normalize=True,
                                            target=lambda t, i=i, sign=sign: sign * t.values[i])
                out[o.metric] = {k: float(v) for k, v in imp.items()}
    except (optuna.exceptions.OptunaError, ValueError, KeyError, ArithmeticError) as exc:
        warnings.warn(f"parameter importances skipped: {exc}", stacklevel=2)
        return {}
    finally:
        optuna.logging.set_verbosity(verbosity)
    return out


# --------------------------------------------------------------------------- the report

def _say(enabled: bool):
    def say(msg: str) -> None:
        if enabled:
            sys.stderr.write(f"[report] {msg}\n")
            sys.stderr.flush()
    return say


def default_out(path) -> Path:
    """``results/q.parquet`` -> ``results/q-report``; a dataset directory ``d`` -> ``d-dataset-report``
    (array tasks write ``results/q/`` beside ``results/q.parquet``: their reports must not share a
    folder); any other file ``f`` -> ``f-report``. A directory named ``.`` or ``..`` is named by its
    absolute path (``dse report .`` in ``/x/q`` writes ``/x/q-dataset-report``).

    >>> str(default_out("results/q.parquet")), str(default_out("notes.txt"))
    ('results/q-report', 'notes.txt-report')
    """
    p = Path(path)
    if p.is_dir():
        p = p if p.name not in ("", ".", "..") else p.resolve()
        if not p.name:                              # the file system's root
            raise DseError(f"{path}: give --out DIR for a report of the root folder")
        return p.with_name(p.name + "-dataset-report")
    base = p.with_suffix("") if p.suffix == ".parquet" else p
    return base.with_name(base.name + "-report")


#: the columns the report reads (patterns for dse.results.analysis.load_results), besides the objectives:
#: the other ~40 columns of a results file are never decoded
REPORT_COLUMNS = ["study", "trial", "state", "sampler", "seed", "params_*", "chips", "peak_tflops", "cost_usd",
                  "power_w", "spec_ms_per_token", "baseline_ms_per_token", "tokens_per_s", "alpha", "tau", "k",
                  "speedup", "draft_cost_ratio", "tree_shape", "fits", "feasible", "constraint_violation",
                  "is_pareto", "pareto_rank", "duplicate_of"]


def _report_columns(ds) -> list[str]:
    """:data:`REPORT_COLUMNS` and the stored objective and constraint metrics, those the results
    (a dse.results.dataset.Dataset) have; with an SLA the serving columns (sla_*, the serving figure's
    chosen points)."""
    import fnmatch
    extra = [o.get("metric") for o in list(ds.meta.get("objectives") or []) + list(ds.meta.get("constraints") or [])
             if isinstance(o, dict)]
    study = ds.meta.get("study") if isinstance(ds.meta.get("study"), dict) else {}
    patterns = REPORT_COLUMNS + (["sla_*"] if (study.get("workload") or {}).get("sla") else [])
    return [n for n in ds.schema.names if any(fnmatch.fnmatch(n, c) for c in patterns) or n in extra]


#: what a sweep's report reads of every row besides the objectives: what its figures use (the
#: fronts, the draft-chip groups, the alpha / tau / k ranges in titles; a sweep has no trial order,
#: so no hypervolume history, and no importances); the front table's columns are read for the
#: front's rows only (dse.results.analysis.front_of)
SWEEP_ROW_COLUMNS = ["feasible", "fits", "alpha", "tau", "k", "params_draft_chip_enabled"]
#: and, when the draft is a knob, what the 'which draft wins where' figure reads of every row
CODESIGN_ROW_COLUMNS = ["params_draft", "params_draft_exit_layer", "params_target_chip_memory",
                        "params_target_chip_device", "params_batch", "speedup"]


def build_report(path, out=None, progress: bool = True, force: bool = False) -> dict:
    """Load results, rebuild the study, compute known parts, speedup vs batch and importances,
    and write the figures and ``index.html``; returns ``{"html": str, "figures": [str]}``. A
    sweep (no importances, no trial order) is read as :data:`SWEEP_ROW_COLUMNS` and the objectives
    for every row and the report's columns for its front only."""
    from .page import write_report
    say = _say(progress)
    say(f"loading {path}")
    from ..results.dataset import open_results
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # load_results warns about missing parts, once
        ds = open_results(path)
    out = Path(out) if out else default_out(path)
    mark = report_mark(path, ds.meta)
    check_report_folder(out, mark, force=force)       # before the work: another input's report is not replaced
    columns = _report_columns(ds)
    sweep = ds.meta.get("sampler") == "grid"        # no trial order and no importances
    if sweep:
        objectives = {o.get("metric") for o in ds.meta.get("objectives") or [] if isinstance(o, dict)}
        every = SWEEP_ROW_COLUMNS + (CODESIGN_ROW_COLUMNS if "params_draft" in ds.schema.names else [])
        rows = [c for c in columns if c in every or c in objectives]
    df = da.load_results(path, columns=rows if sweep else columns)
    if not len(df):
        raise DseError(f"{path}: no rows to report")
    study = study_from_results(df)
    objs = [(o.metric, o.direction) for o in study.objectives]
    front = None
    if sweep:
        say("the front's rows")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # load_results has warned about missing parts
            front = da.front_of(path, objs, columns=columns)
    if not da.feasible_mask(df).any():
        say("no feasible design: the front figure shows infeasible designs only")
    say("evaluating known parts")
    known = known_parts(study)
    svb, skipped = None, []
    dk = study.knob("draft")
    if study.drafter.kind != "none" or (dk is not None and dk.searched):
        say("speedup against batch size for the front")
        svb = speedup_vs_batch(study, da.front(df, objs) if front is None else front)
        if not len(svb):
            skipped.append(("Speedup against batch size", "no feasible design on the front"))
    else:
        skipped.append(("Speedup against batch size", "the study has no drafter (workload.draft: none)"))
    serving = None
    if study.workload.sla is not None:
        from .serving_figure import serving_data
        say("serving curves for the front")
        serving = serving_data(study, da.front(df, objs) if front is None else front)
        if serving is None:
            skipped.append(("Serving under the SLA", "no design on the front meets the SLA"))
    if not sweep:
        say("parameter importances")
        imps = importances(df, study)
        if not imps:
            skipped.append(("Parameter importance", _why_no_importances(df, study)))
    else:
        imps = {}
        skipped.append(("Parameter importance", "a sweep evaluates every grid point: importances are of a "
                        "search's trials (dse run)"))
    res = write_report(df, out, known_parts=known, speedup_vs_batch=svb, importances=imps, progress=say,
                       objectives=objs, front=front, skipped=skipped, serving=serving)
    write_report_mark(out, mark)
    return res


def _why_no_importances(df: pd.DataFrame, study: StudySpec) -> str:
    """Why :func:`importances` gave nothing."""
    if len(study.searched) < 2:
        return f"the study searches {len(study.searched)} knob: importance compares two or more"
    n = len(_usable_rows(df, study))
    if n < MIN_IMPORTANCE_ROWS:
        return f"{n} feasible trials with every knob set: PED-ANOVA needs at least {MIN_IMPORTANCE_ROWS}"
    return "Optuna's PED-ANOVA failed (the warning above says why)"
