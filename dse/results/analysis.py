"""Load dse results and analyse their Pareto fronts with pandas.

Results are what ``dse run`` / ``dse sweep`` write: one Parquet file or a directory of
``part-*.parquet`` files, one row per design, with the study (objectives, constraints,
workload) in the schema metadata key ``b"dse"``. :func:`load_results` puts that metadata in
``df.attrs["dse"]``, so the other functions can default to the study's own objectives.

Feasibility: a row counts when column ``feasible`` is True; without that column, when ``fits``
is True; without either, every row counts. Rows with a NaN objective never count.

Example (a results directory from ``dse run``)::

    import dse.results.analysis as da
    df = da.load_results("results/h200_eagle")
    best = da.front(df, where="power_w <= 700")              # study objectives, sorted
    cheap = da.front(df, ["spec_ms_per_token:min", "cost_usd:min"])
    da.hypervolume(df)                                       # default reference
    hist = da.hypervolume_history(df)                        # one row per checkpoint
    da.compare_fronts(df[df.params_draft_chip_enabled], df[~df.params_draft_chip_enabled])

Known parts on a study's workload: :func:`dse.report.known_parts`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import DseError
from . import pareto
from .dataset import open_results
from .front import epsilon_of, resolve_objectives, stored_objectives, table_columns
from .load import load_results, restore_nullable

__all__ = ["load_results", "front_of", "objectives_of", "feasible_mask", "front", "ranks", "hypervolume",
           "hypervolume_reference", "compare_fronts", "hypervolume_history", "usable_values", "directions", "front_table",
           "counts", "count_designs", "new_design_mask", "DISPLAY_EPSILON"]



# --------------------------------------------------------------------------- objectives

def _numeric_columns(df: pd.DataFrame) -> list[str]:
    return [c for c, dt in df.dtypes.items()     # dtypes, not df[c]: no copy of attrs per column
            if pd.api.types.is_numeric_dtype(dt) and not pd.api.types.is_bool_dtype(dt)]


def objectives_of(df: pd.DataFrame, objectives=None) -> list[tuple[str, str]]:
    """Resolve objectives to ``[(column, "minimize"|"maximize"), ...]``
    (dse.results.front.resolve_objectives against the numeric columns of ``df``).

    Args:
        df: results; its ``attrs["dse"]["objectives"]`` are the default.
        objectives: None (the study's objectives); strings ``"metric:min"`` /
            ``"metric:max"`` (a bare ``"metric"`` takes the study's direction for it);
            ``(metric, direction)`` pairs; or ``{"metric", "direction"}`` dicts. One string
            may list several, comma-separated.

    Raises:
        DseError: no objectives given or stored, a bad direction, or a column that is not a
            numeric column of ``df`` (the message lists the numeric columns).
    """
    return resolve_objectives(objectives, df.attrs.get("dse"), _numeric_columns(df), list(df.columns))


def feasible_mask(df: pd.DataFrame) -> np.ndarray:
    """Column ``feasible`` if present, else ``fits``, else all True; NA counts as False."""
    for col in ("feasible", "fits"):
        if col in df.columns:
            return df[col].fillna(False).to_numpy(dtype=bool)
    return np.ones(len(df), dtype=bool)


def _values(df: pd.DataFrame, objs) -> np.ndarray:
    return df[[m for m, _ in objs]].to_numpy(dtype=np.float64, na_value=np.nan)


def directions(objs) -> list[str]:
    """The directions of resolved objectives, in order."""
    return [d for _, d in objs]


def usable_values(df: pd.DataFrame, objs) -> tuple[np.ndarray, np.ndarray]:
    """(objective values (n, m), mask of feasible rows with finite objectives)."""
    vals = _values(df, objs)
    return vals, feasible_mask(df) & np.isfinite(vals).all(axis=1)


# --------------------------------------------------------------------------- fronts

#: the relative epsilon that tables shown to a person use by default (dse.results.pareto.DISPLAY_EPSILON)
DISPLAY_EPSILON = pareto.DISPLAY_EPSILON


def front(df: pd.DataFrame, objectives=None, where: str | None = None, distinct: bool = True,
          epsilon=0.0) -> pd.DataFrame:
    """The feasible non-dominated rows, best first by the first objective.

    Args:
        df: results.
        objectives: see :func:`objectives_of` (default: the study's).
        where: a ``DataFrame.query`` string applied before the front is taken, e.g.
            ``"power_w <= 700 and params_k == 4"``.

        distinct: one row per point of the front, the first found (lowest trial): repeats of
            a design (``duplicate_of`` set) and later rows with the same objective values are
            left out. False keeps every non-dominated row.
        epsilon: relative, per objective (a number, a sequence or ``{metric: eps}``): near-ties are
            collapsed into one representative, the first in the order above: a row is left out
            when a row kept before it is at most epsilon worse in every objective
            (dse.results.pareto.epsilon_thin). 0 (the default) keeps the exact front;
            :data:`DISPLAY_EPSILON` is what ``dse run`` and ``dse pareto`` show.

    Returns:
        The front's rows (all columns, original index). Sorted best first (ascending when
        minimised, descending when maximised) by the first objective, ties broken by the next
        objectives.
    """
    objs = objectives_of(df, objectives)
    eps = epsilon_of(epsilon, objs)
    if where:
        df = query(df, where)
    vals, ok = usable_values(df, objs)
    trial = df["trial"].to_numpy(dtype=np.float64, na_value=np.nan) if distinct and "trial" in df.columns else None
    rows = pareto.front_order(vals, directions(objs), ok, order=trial, distinct=distinct)
    if eps.any():
        rows = rows[pareto.epsilon_thin(vals[rows], directions(objs), eps)]
    return df.iloc[rows]


def query(df: pd.DataFrame, where: str) -> pd.DataFrame:
    """The rows of ``df`` for which the condition ``where`` (``DataFrame.eval``) is True (NA: False); any
    failure, and an expression that is not a condition (``"chips"``: DataFrame.query would select rows by
    those values as labels), as one DseError naming the expression."""
    try:
        keep = df.eval(where)
    except Exception as e:  # eval raises many types; report them uniformly
        raise DseError(f"where = {where!r}: {e}") from e
    if not (isinstance(keep, pd.Series) and pd.api.types.is_bool_dtype(keep.dtype) and keep.index.equals(df.index)):
        got = (f"{keep.dtype} values" if isinstance(keep, pd.Series) else "a table" if isinstance(keep, pd.DataFrame)
               else f"the value {keep!r:.40}")
        raise DseError(f"where = {where!r}: is not a condition: it gives {got}, not True or False for each row; "
                       "write one such as 'chips <= 2'")
    return df[keep.fillna(False).to_numpy(dtype=bool)]


def counts(df: pd.DataFrame, objectives=None, where: str | None = None) -> dict[str, int]:
    """The counts every dse tool prints, in one vocabulary: ``rows`` (trials or grid points),
    ``designs`` (distinct designs: rows that repeat no earlier one, :func:`count_designs`),
    ``feasible`` (distinct designs that are feasible, :func:`feasible_mask`) and ``front`` (the
    points of the exact front, one design each: a repeat or an exact tie counts once), after
    ``where`` when given."""
    objs = objectives_of(df, objectives)
    if where:
        df = query(df, where)
    new = new_design_mask(df)
    vals, ok = usable_values(df, objs)
    on_front = pareto.first_of_equal(vals, pareto.pareto_mask(vals, directions(objs), feasible=ok))
    return {"rows": len(df), "designs": int(new.sum()), "feasible": int((feasible_mask(df) & new).sum()),
            "front": int(on_front.sum())}


def new_design_mask(df: pd.DataFrame) -> np.ndarray:
    """True where a row is a design no earlier row holds (``duplicate_of`` null; every row without it)."""
    if "duplicate_of" in df.columns:
        return df["duplicate_of"].isna().to_numpy(dtype=bool)
    return np.ones(len(df), dtype=bool)


def front_of(path, objectives=None, where: str | None = None, distinct: bool = True,
             columns=None, epsilon=0.0) -> pd.DataFrame:
    """:func:`front` of a results file or dataset, read part by part: the objective, feasible
    (or fits) and duplicate_of columns of each part, as numpy (every column, through pandas, when
    ``where`` is given), that part's front kept; the global front is a subset of the union of the part fronts (a point
    dominated within its part is dominated globally), so the front of that union is the front of
    the whole, and full rows are read for its rows only: ``columns`` (names or fnmatch patterns
    such as ``"params_*"``; names not in the results are skipped; default all). Memory is
    bounded by a part and the front, not the dataset.

    Returns:
        As :func:`front` (index: row number in the dataset), without is_pareto / pareto_rank;
        ``attrs["dse"]`` the metadata, ``attrs["counts"]`` the dataset's :func:`counts` (rows,
        designs, feasible, front: of the rows ``where`` keeps), and ``attrs["rows"]`` and
        ``attrs["designs"]`` as there.
    """
    ds = open_results(path)
    empty = restore_nullable(ds.schema.empty_table().to_pandas(), ds.schema)
    empty.attrs["dse"] = ds.meta
    objs = objectives_of(empty, objectives)
    names = ds.schema.names
    key = [m for m, _ in objs] + [c for c in ("feasible", "fits", "trial", "duplicate_of", "state") if c in names]
    key = list(dict.fromkeys(key))
    wanted = names if columns is None else [c for pat in list(columns) + key for c in fnmatch.filter(names, pat)]
    cols = [c for c in dict.fromkeys(wanted) if c not in ("is_pareto", "pareto_rank")]
    if where:
        ds.check_trials()
        keep, n_rows, n_designs, n_feasible = _front_rows_where(ds, objs, key, where)
        parts = ds.take(keep, cols)
        table = pa.concat_tables([t for _, t in parts]) if parts else ds.schema.empty_table().select(cols)
    else:           # a sweep's _front.parquet, else numpy over the few columns the front needs
        keep, table, n_rows, n_designs = ds.front_table(objs, cols)
        n_feasible = ds.feasible_designs()
    full = restore_nullable(table.to_pandas(), ds.schema).set_index(pd.Index(keep))
    out = front(full, objs, distinct=distinct, epsilon=epsilon)
    points = len(front(full, objs)) if (distinct is False or epsilon_of(epsilon, objs).any()) else len(out)
    tally = {"rows": n_rows, "designs": n_designs, "feasible": n_feasible, "front": points}
    out.attrs.update({"dse": ds.meta, "rows": n_rows, "designs": n_designs, "counts": tally})
    return out


def per_column(df: pd.DataFrame, per: str) -> str:
    """The column ``per`` names: itself, or the knob's ``params_<per>`` (``batch`` -> ``params_batch``)."""
    for name in (per, f"params_{per}"):
        if name in df.columns:
            return name
    knobs = sorted(c.removeprefix("params_") for c in df.columns if c.startswith("params_"))
    raise DseError(f"--per {per}: no such knob or column in these results (knobs: {', '.join(knobs) or 'none'})")


def fronts_per(path, per: str, objectives=None, where: str | None = None, columns=None,
               epsilon=0.0) -> pd.DataFrame:
    """:func:`front_of` within each value of column ``per`` (a knob such as ``batch``), concatenated in
    the order of the values: where a knob trades one objective for another along its whole range
    (a larger batch: more throughput per chip, more latency per token), nearly every design is on
    the one front, and the fronts at one value each are what compares designs. ``attrs["counts"]``
    sums the per-value counts (``front``: designs on some value's front); ``attrs["per"]`` the column."""
    ds = open_results(path)
    empty = restore_nullable(ds.schema.empty_table().to_pandas(), ds.schema)
    col = per_column(empty, per)
    values = sorted((v for v in ds.read([col]).column(col).unique().to_pylist() if v is not None),
                    key=lambda v: (isinstance(v, str), v))
    frames, tally = [], {"rows": 0, "designs": 0, "feasible": 0, "front": 0}
    for v in values:
        cond = f"`{col}` == {v!r}"
        fr = front_of(path, objectives, where=f"({where}) and {cond}" if where else cond, columns=columns,
                      epsilon=epsilon)
        frames.append(fr)
        tally = {k: tally[k] + fr.attrs["counts"][k] for k in tally}
    out = pd.concat(frames) if frames else front_of(path, objectives, where=where, columns=columns)
    out.attrs.update({"dse": ds.meta, "counts": tally, "per": col, "per_values": len(values)})
    return out


def _front_rows_where(ds, objs, key, where) -> tuple[np.ndarray, int, int, int]:
    """(front rows, rows, designs, feasible designs) of the rows that satisfy ``where`` (a
    DataFrame.query string on every column of each part): the totals count the kept rows only."""
    dirs = directions(objs)
    cand, n_rows, n_designs, n_feasible, offset = [], 0, 0, 0, 0
    for (_, t), n in zip(ds.parts(None), ds.counts, strict=True):
        part = restore_nullable(t.to_pandas(), ds.schema)
        part.index = pd.RangeIndex(offset, offset + n)
        part = query(part, where)
        new = new_design_mask(part)
        n_rows, n_designs = n_rows + len(part), n_designs + int(new.sum())
        n_feasible += int((feasible_mask(part) & new).sum())
        vals, ok = usable_values(part, objs)
        mask = pareto.pareto_mask(vals, dirs, feasible=ok)
        cand.append(part[key][mask])
        offset += n
    if not cand:
        return np.empty(0, np.int64), 0, 0, 0
    union = pd.concat(cand)
    vals, ok = usable_values(union, objs)
    return union.index.to_numpy()[pareto.pareto_mask(vals, dirs, feasible=ok)], n_rows, n_designs, n_feasible


def ranks(df: pd.DataFrame, objectives=None) -> pd.Series:
    """Non-dominated sorting rank per row (Int64; 0 = front, NA = infeasible or NaN)."""
    objs = objectives_of(df, objectives)
    vals, ok = usable_values(df, objs)
    r = pareto.pareto_ranks(vals, directions(objs), feasible=ok)
    arr = pd.array(r, dtype="Int64")
    arr[r < 0] = pd.NA
    return pd.Series(arr, index=df.index, name="pareto_rank")


def _ref_array(reference, objs) -> np.ndarray:
    if isinstance(reference, Mapping):
        missing = [m for m, _ in objs if m not in reference]
        if missing:
            raise DseError(f"reference has no value for {', '.join(missing)}")
        reference = [reference[m] for m, _ in objs]
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    if ref.shape != (len(objs),) or not np.isfinite(ref).all():
        raise DseError(f"reference {reference!r}: expected {len(objs)} finite values, one per "
                       f"objective ({', '.join(m for m, _ in objs)})")
    return ref


def _default_ref(frames, objs) -> np.ndarray:
    parts = []
    for d in frames:
        vals, ok = usable_values(d, objs)
        parts.append(vals[ok])
    pts = np.concatenate(parts) if parts else np.empty((0, len(objs)))
    if pts.shape[0] == 0:
        raise DseError("no feasible designs to derive a hypervolume reference from; pass "
                       "reference= explicitly")
    return pareto.default_reference(pts, directions(objs))


def hypervolume_reference(df: pd.DataFrame, objectives=None) -> dict[str, float]:
    """Default reference: the worst feasible value per objective pushed out by 10% of its
    range (:func:`dse.results.pareto.default_reference`), as ``{metric: value}``."""
    objs = objectives_of(df, objectives)
    return dict(zip([m for m, _ in objs], _default_ref([df], objs).tolist(), strict=True))


def hypervolume(df: pd.DataFrame, objectives=None, reference=None) -> float:
    """Hypervolume of the feasible designs (Zitzler & Thiele 1998), via moocore.

    Args:
        reference: ``{metric: value}`` or a sequence in objective order; default
            :func:`hypervolume_reference`. Designs that do not dominate it add nothing.
    """
    objs = objectives_of(df, objectives)
    ref = _default_ref([df], objs) if reference is None else _ref_array(reference, objs)
    vals, ok = usable_values(df, objs)
    return pareto.hypervolume(vals[ok], directions(objs), ref)


def compare_fronts(a: pd.DataFrame, b: pd.DataFrame, objectives=None, reference=None) -> dict:
    """Compare two result sets by hypervolume against one shared reference.

    Returns:
        ``{"objectives", "reference", "hv_a", "hv_b", "hv_union", "hv_only_a", "hv_only_b",
        "front_size_a", "front_size_b"}`` (front sizes: points, a repeat or a tie counted once).
        ``hv_only_a = hv_union - hv_b`` is the volume only
        ``a`` reaches. The default reference is computed from the feasible rows of both.
    """
    objs = objectives_of(a if objectives is not None or stored_objectives(a.attrs.get("dse")) else b, objectives)
    ref = _default_ref([a, b], objs) if reference is None else _ref_array(reference, objs)
    dirs = directions(objs)
    va, oka = usable_values(a, objs)
    vb, okb = usable_values(b, objs)
    hv_a = pareto.hypervolume(va[oka], dirs, ref)
    hv_b = pareto.hypervolume(vb[okb], dirs, ref)
    hv_u = pareto.hypervolume(np.concatenate([va[oka], vb[okb]]), dirs, ref)
    return {"objectives": objs, "reference": dict(zip([m for m, _ in objs], ref.tolist(),
                                                       strict=True)),
            "hv_a": hv_a, "hv_b": hv_b, "hv_union": hv_u,
            "hv_only_a": hv_u - hv_b, "hv_only_b": hv_u - hv_a,
            "front_size_a": int(pareto.first_of_equal(va, pareto.pareto_mask(va, dirs, oka)).sum()),
            "front_size_b": int(pareto.first_of_equal(vb, pareto.pareto_mask(vb, dirs, okb)).sum())}


def hypervolume_history(df: pd.DataFrame, objectives=None, reference=None, order: str = "trial",
                        max_points: int = 200) -> pd.DataFrame:
    """Hypervolume of the feasible front after each trial (a convergence curve).

    Rows are sorted by ``order``; the hypervolume is evaluated at up to ``max_points``
    evenly spaced checkpoints (every row for short studies, always including the last). The
    front is carried from one checkpoint to the next, so the cost is about one non-dominated
    filter over all rows. The reference is fixed for the whole curve (default: from all
    feasible rows, :func:`hypervolume_reference`).

    Returns:
        Columns ``order`` (its value at the checkpoint), ``n_rows`` (rows so far), ``n_designs``
        and ``n_feasible`` (distinct designs so far, all and feasible, as :func:`counts`),
        ``front_size`` (points of the front so far: a repeat or an exact tie counts once) and
        ``hypervolume``.
    """
    objs = objectives_of(df, objectives)
    if order not in df.columns:
        raise DseError(f"order = {order!r} is not a column of the results")
    ref = _default_ref([df], objs) if reference is None else _ref_array(reference, objs)
    idx = df[order].argsort(kind="stable").to_numpy()
    vals, ok = usable_values(df, objs)
    vals, ok = vals[idx], ok[idx]
    new = new_design_mask(df)[idx]
    dirs = directions(objs)
    n = len(df)
    stops = np.unique(np.linspace(1, n, min(n, max(1, max_points))).round().astype(np.int64))
    n_new, n_ok = np.cumsum(new), np.cumsum(feasible_mask(df)[idx] & new)
    fronts, hvs = [], []
    current = np.empty((0, len(objs)))
    start = 0
    for stop in stops:  # <= max_points iterations; each filters the carried front + new rows
        new = vals[start:stop][ok[start:stop]]
        if new.shape[0]:
            cand = np.concatenate([current, new])
            current = cand[pareto.pareto_mask(cand, dirs)]
        start = stop
        fronts.append(np.unique(current, axis=0).shape[0] if current.shape[0] else 0)
        hvs.append(pareto.hypervolume(current, dirs, ref))
    out = pd.DataFrame({
        order: df[order].iloc[idx[stops - 1]].reset_index(drop=True),
        "n_rows": stops, "n_designs": n_new[stops - 1], "n_feasible": n_ok[stops - 1],
        "front_size": np.asarray(fronts, dtype=np.int64),
        "hypervolume": np.asarray(hvs, dtype=np.float64)})
    out.attrs["reference"] = dict(zip([m for m, _ in objs], ref.tolist(), strict=True))
    return out


def count_designs(df: pd.DataFrame) -> int:
    """Distinct designs among the rows: rows that do not repeat an earlier one (``duplicate_of``
    null; every row in files written before that column existed)."""
    if "duplicate_of" in df.columns:
        return int(df["duplicate_of"].isna().sum())
    return len(df)


def front_table(df: pd.DataFrame, objectives=None, top: int | None = None, epsilon=0.0) -> pd.DataFrame:
    """The front (:func:`front`, near-ties within ``epsilon`` collapsed), best first by the first
    objective, its first ``top`` rows: objectives, then the speculative accounting present among
    ``alpha, tau, k, draft_cost_ratio, speedup``, ``tree_shape`` when a shown design has a tree,
    ``trial`` and every ``params_*`` knob (dse.results.front.table_columns)."""
    objs = objectives_of(df, objectives)
    out = front(df, objs, epsilon=epsilon)
    if top is not None:
        out = out.head(top)
    tree = "tree_shape" in out.columns and bool(out["tree_shape"].fillna("").astype(str).str.len().gt(0).any())
    out = out[table_columns(list(out.columns), objs, tree)]
    return out.reset_index(drop=True)
