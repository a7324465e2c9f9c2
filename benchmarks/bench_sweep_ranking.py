"""The share of a `dse sweep`'s wall time spent ranking its rows, on multi-million-point grids of 3 and 5 objectives.

Run:  python benchmarks/bench_sweep_ranking.py [--quick] [--full-ranks]

Three grids, each swept in this process (dse.campaign.grid.sweep, one shard, default chunks),
timed by phase with wrappers on module attributes (as bench_search.py (b')):
  moe-3obj   benchmarks/studies/moe-many-chips.yaml at points 8: 2,949,120 grid points, every
             one a design (DeepSeek-V3, tree drafts; about a third fit and are ranked); 3 objectives.
  dense-5obj benchmarks/studies/four-objectives.yaml at points 3 without its constraints, with
             ttft_ms as a fifth objective: 3,359,232 grid points, 1,378,728 designs (draft-chip
             knobs taken at one value when the chip is off); every design that fits is ranked.
  quick-5obj studies/quickstart.yaml at points 14 without its power cap, with power_w, ttft_ms and
             total_die_area_mm2 as objectives 3-5: 2,370,816 grid points, 1,820,448 designs; the
             fastest model of the three (the hardest case for the share).
Ranking = everything the sweep does for the Pareto flags: each chunk's objective arrays and front
(dse.campaign.grid.Usable.of) and the side files (the front of the chunks' fronts, _pareto.parquet,
_front.parquet: _write_side_files). Target per grid: ranking <= 25% of the sweep's wall time. The
evaluation (dse.evaluation.designs.evaluate_study) is shown beside it.
Checked each time: the rows on the front in _pareto.parquet are exactly the non-dominated rows of
all the usable rows (dse.results.pareto.pareto_mask over every one of them at once).
--full-ranks also times every usable row's non-dominated rank (dse.results.pareto.pareto_ranks:
what the sweep computed before it stored the front only, and what load_results now costs when
pareto_rank is read): shown, no target.
--quick: points 6 and 2 (933,120 and 196,608 grid points), no targets (a smoke run).
Takes about a minute on 2 idle cores (--full-ranks: about a minute more).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from _targets import report  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_search import Timers  # noqa: E402

SHARE = 0.25        # ranking / wall
STUDIES = ROOT / "benchmarks" / "studies"


def grids(quick: bool) -> list[tuple[str, object, int]]:
    """(label, study, points) of the two grids."""
    from dse.study import load_study, parse_study
    moe = load_study(STUDIES / "moe-many-chips.yaml")
    raw = yaml.safe_load((STUDIES / "four-objectives.yaml").read_text())
    raw["name"] = "four-objectives-5obj"
    raw.pop("constraints", None)
    raw["objectives"].append({"metric": "ttft_ms", "direction": "minimize"})
    dense = parse_study(raw, STUDIES / "four-objectives.yaml")
    quick_path = ROOT / "studies" / "quickstart.yaml"
    raw = yaml.safe_load(quick_path.read_text())
    raw["name"] = "quickstart-5obj"
    raw.pop("constraints", None)
    raw["objectives"] += [{"metric": m, "direction": "minimize"} for m in ("power_w", "ttft_ms", "total_die_area_mm2")]
    fast = parse_study(raw, quick_path)
    return [("moe-3obj", moe, 6 if quick else 8), ("dense-5obj", dense, 2 if quick else 3),
            ("quick-5obj", fast, 8 if quick else 14)]


def timed_sweep(study, points: int, out: Path, full_ranks: bool) -> dict:
    """One sweep with its phases, the check of its front, and (full_ranks) the time to rank every usable row."""
    import dse.campaign.grid as grid
    from dse.results import pareto
    from dse.results.dataset import open_results
    tm = Timers()
    tm.wrap(grid, "evaluate_study", "evaluate")
    tm.wrap(grid, "_write_side_files", "side files")
    of = grid.Usable.of.__func__

    def chunk_front(cls, *a, **kw):
        t = time.perf_counter()
        try:
            return of(cls, *a, **kw)
        finally:
            tm.seconds["chunk fronts"] += time.perf_counter() - t
    grid.Usable.of = classmethod(chunk_front)
    try:
        t, cpu = time.perf_counter(), time.process_time()
        res = grid.sweep(study, points=points, out=out, progress=False)
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    finally:
        grid.Usable.of = classmethod(of)
        tm.restore()
    objs = [(o.metric, o.direction) for o in study.objectives]
    dirs = [d for _, d in objs]
    ds = open_results(out)
    rows, vals = ds.usable(objs)
    side = ds.global_flags(ranks=False)
    t = time.perf_counter()
    whole = pareto.pareto_mask(vals, dirs)
    t_mask = time.perf_counter() - t
    same = bool(np.array_equal(np.flatnonzero(side.front), rows[whole]))
    out_d = {"rows": res.rows_written, "total": res.total_points, "wall": wall, "cpu": cpu, "usable": rows.size,
             "front": int(whole.sum()), "same_front": same, "one_mask_s": t_mask, **tm.seconds}
    if full_ranks:
        t = time.perf_counter()
        r = pareto.pareto_ranks(vals, dirs)
        out_d["full_ranks_s"] = time.perf_counter() - t
        out_d["fronts"] = int(r.max()) + 1 if r.size else 0
        out_d["same_front"] &= bool(np.array_equal(r == 0, whole))
    return out_d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller grids, no targets")
    ap.add_argument("--full-ranks", action="store_true", help="also time every usable row's rank (shown)")
    args = ap.parse_args(argv)
    results = []
    print(f"{'grid':<11}{'objs':>5}{'grid pts':>11}{'designs':>11}{'ranked':>11}{'front':>7}{'wall s':>8}"
          f"{'CPU s':>8}{'eval s':>8}{'rank s':>8}{'rank/wall':>10}{'rank/eval':>10}  front exact")
    for label, study, points in grids(args.quick):
        with tempfile.TemporaryDirectory() as tmp:
            r = timed_sweep(study, points, Path(tmp) / label, args.full_ranks)
        rank = r["chunk fronts"] + r["side files"]
        share = rank / r["wall"]
        print(f"{label:<11}{len(study.objectives):>5}{r['total']:>11,}{r['rows']:>11,}{r['usable']:>11,}"
              f"{r['front']:>7,}{r['wall']:>8.1f}{r['cpu']:>8.1f}{r['evaluate']:>8.1f}{rank:>8.2f}"
              f"{share:>10.3f}{rank / r['evaluate']:>10.3f}  {r['same_front']}")
        print(f"{'':<11}ranking: chunk fronts {r['chunk fronts']:.2f} s, side files {r['side files']:.2f} s; "
              f"one pareto_mask over all {r['usable']:,} ranked rows {r['one_mask_s']:.2f} s (the check)")
        if args.full_ranks:
            print(f"{'':<11}every row's rank (pareto_ranks, {r['fronts']:,} fronts): {r['full_ranks_s']:.1f} s, "
                  f"{r['full_ranks_s'] / r['wall']:.2f}x this sweep's wall time")
        results.append((f"{label}: the front is exact", str(r["same_front"]), "True", r["same_front"]))
        if not args.quick:
            results.append((f"{label}: ranking / sweep wall time", f"{share:.3f}", f"<= {SHARE}", share <= SHARE))
    print("The machine is shared (2 cores): wall times depend on the load; CPU s is this process's.")
    return report(results, width=12)


if __name__ == "__main__":
    sys.exit(main())
