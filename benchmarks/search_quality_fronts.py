"""Best known fronts of the search-quality benchmark (issue 20, item 5): built by long runs, stored.

Run:  python benchmarks/search_quality_fronts.py [--studies NAME ...] [--designs 3e6] [--seeds 3]
          [--polish 30] [--add RESULTS.parquet ...]

For each study (benchmarks/studies/*.yaml and the shipped studies/quickstart.yaml and
studies/draft-chip.yaml):

1. the stored front, benchmarks/fronts/NAME.parquet, re-evaluated with today's model (a front
   built under an older model keeps its designs, not its numbers);
2. --seeds long pre-searches (dse.search.presearch, seeds 1000, 1001, ...), each of --designs designs: a
   third uniform, the rest in 60 rounds of refinement; archive 20,000 designs, 2,000 per niche;
3. polishing: --polish rounds of 100,000 children of the union (crossover and mutation) at steps
   falling from 2% to 0.05% of each knob's range;
4. the designs of --add results files (e.g. the runs of bench_search_quality.py, which writes
   the feasible front of every run it makes to the temp folder);
5. the union's front (feasible, non-dominated, one design per objective vector), cut to at most
   5,000 designs (dse.search.thinning.thin: exact hypervolume contributions up to 3 objectives,
   epsilon boxes and estimated contributions above), written back: one row per design, its active
   knobs (null where inactive) and objective values.

A full build (3 seeds of 3 million designs, 30 polishing rounds) takes 5-30 minutes a study on 2
cores. bench_search_quality.py reads these files; it never builds them.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dse.search.presearch import Budget, Pool, fill_neutral, first_distinct, presearch, score, seed_params  # noqa: E402
from dse.search.thinning import thin  # noqa: E402
from dse.study import open_study  # noqa: E402

FRONTS = ROOT / "benchmarks" / "fronts"
#: the studies with a best known front (six-objectives is timed only: bench_search_quality.py)
STUDIES = {n: ROOT / "studies" / f"{n}.yaml" for n in ("quickstart", "draft-chip")}
STUDIES.update({n: ROOT / "benchmarks" / "studies" / f"{n}.yaml" for n in ("wide-27-knobs", "four-objectives",
                                                                          "moe-many-chips", "qwen-draft-codesign",
                                                                          "moe-ep-runtime")})
#: designs kept in a stored front (cutting a 2-objective front of 18,600 to 5,000 loses 7e-7 of
#: its hypervolume), and in the union while it is built
FRONT_MAX, UNION_MAX = 5_000, 20_000


def front_path(name: str) -> Path:
    return FRONTS / f"{name}.parquet"


def rows_of(frame: pd.DataFrame, study) -> list[dict]:
    """Parameter dicts (active knobs only) from a front or results file (params_ prefix or not)."""
    out = []
    cols = {k.name: (k.name if k.name in frame.columns else f"params_{k.name}") for k in study.searched}
    recs = frame[list(cols.values())].to_dict("records")
    for r in recs:
        row = {}
        for name, col in cols.items():
            v = r[col]
            if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
                continue
            row[name] = v.item() if isinstance(v, np.generic) else v
        out.append(row)
    return out


def evaluate_rows(study, db, tech, rows: list[dict]) -> tuple[dict, np.ndarray, np.ndarray]:
    """(knob arrays, objective values, feasible) of parameter dicts, with today's model."""
    params = fill_neutral(study, rows)
    vals, feas = score(study, params, len(rows), db, tech)
    return params, vals, feas


def load_front(name: str, study, db, tech) -> tuple[dict, np.ndarray] | None:
    """The stored front's designs, re-evaluated: (knob arrays, objective values) of the feasible ones."""
    path = front_path(name)
    if not path.exists():
        return None
    rows = rows_of(pd.read_parquet(path), study)
    if not rows:
        return None
    params, vals, feas = evaluate_rows(study, db, tech, rows)
    return {k: v[feas] for k, v in params.items()}, vals[feas]


def save_front(name: str, study, params: dict, vals: np.ndarray) -> None:
    idx = np.arange(vals.shape[0])
    from dse.search.presearch import Archive
    rows = seed_params(study, Archive(params, vals, [o.direction for o in study.objectives]), idx)
    frame = pd.DataFrame({k.name: pd.Series([r.get(k.name) for r in rows], dtype=object) for k in study.searched})
    for j, o in enumerate(study.objectives):
        frame[o.metric] = vals[:, j]
    FRONTS.mkdir(parents=True, exist_ok=True)
    tmp = front_path(name).with_suffix(".tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(front_path(name))


def build(name: str, designs: int, seeds: int, polish: int, add: list[Path]) -> None:
    study, db, tech = open_study(STUDIES[name])
    dirs = [o.direction for o in study.objectives]
    t0 = time.time()
    union = Pool.empty(study, UNION_MAX, 2_000)
    old = load_front(name, study, db, tech)
    if old is not None:
        union.merge(old[0], old[1], np.ones(len(old[1]), dtype=bool))
        print(f"{name}: stored front {len(old[1])} designs", flush=True)
    for p in add:
        rows = rows_of(pd.read_parquet(p), study)
        params, vals, feas = evaluate_rows(study, db, tech, rows)
        union.merge(params, vals, feas)
        print(f"{name}: + {p.name}: {int(feas.sum())} feasible designs", flush=True)
    for s in range(seeds):
        b = Budget(initial=designs // 3, initial_max=designs // 3, feasible_wanted=0, children=designs * 2 // 3 // 60,
                   rounds=60, archive_max=UNION_MAX, keep=1, seconds=math.inf, niche_max=2_000)
        res = presearch(study, db, tech, seed=1000 + s, keep=1, budget=b)
        a = res.pool.archive
        union.merge(a.params, a.values, np.ones(len(a), dtype=bool))
        for arch in res.pool.niches.values():
            union.merge(arch.params, arch.values, np.ones(len(arch), dtype=bool))
        print(f"{name}: seed {1000 + s}: {res.evaluated:,} designs, archive {len(a)}, union {len(union.archive)} "
              f"({time.time() - t0:.0f} s)", flush=True)
    rng = np.random.default_rng(7)
    for r in range(polish):
        scale = 0.02 * (0.025 ** (r / max(polish - 1, 1)))           # 2% -> 0.05%
        kids = union.children(100_000, scale, rng)
        if kids is None:
            break
        vals, feas = score(study, kids, 100_000, db, tech)
        union.merge(kids, vals, feas)
    a = union.archive
    keep = first_distinct(a.values)
    params, vals = {k: v[keep] for k, v in a.params.items()}, a.values[keep]
    if len(vals) > FRONT_MAX:
        idx = thin(vals, FRONT_MAX, dirs)
        params, vals = {k: v[idx] for k, v in params.items()}, vals[idx]
    save_front(name, study, params, vals)
    print(f"{name}: front {len(vals)} designs written to {front_path(name).relative_to(ROOT)} "
          f"({time.time() - t0:.0f} s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", nargs="+", default=list(STUDIES), choices=list(STUDIES))
    ap.add_argument("--designs", type=float, default=3e6, help="designs per long pre-search")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--polish", type=int, default=30, help="polishing rounds of 100,000 designs")
    ap.add_argument("--add", nargs="*", type=Path, default=[], help="results files whose designs join the front")
    args = ap.parse_args()
    for name in args.studies:
        build(name, int(args.designs), args.seeds, args.polish, [p for p in args.add if p.stem.startswith(name)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
