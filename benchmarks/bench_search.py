"""Time NSGA-II search and grid sweeps of studies/quickstart.yaml, and the peak memory of a big sweep.

Run:  python benchmarks/bench_search.py [--trials 2000] [--big-rows 10000000] [--quick]

(a) run_study(quickstart, n_trials=2000) with the default journal-file storage and with
    ':memory:'; the time inside dse.search.evaluate_study (build_designs + evaluate, wrapped
    with a timer; this includes the final re-evaluation of every trial for the Parquet file) as
    a share of the run's wall time. Target: < 5% for both storages. Optuna is imported and one
    64-trial in-memory run is done first, untimed.
(b) sweep(quickstart, points=P) with P the smallest grid resolution giving >= 1,000,000 rows:
    points per second, and where the time goes (no target).
(c) the same at >= --big-rows (10,000,000) rows, in a subprocess so that ru_maxrss is the sweep's
    own: rows, wall time, peak RSS, size on disk. Target: peak RSS <= 2 GB (2e9 bytes).
    --quick runs this at 1,000,000 rows instead. A sweep slower than 10 minutes is reported.
Exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from _targets import report  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STUDY = Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml"
RSS_LIMIT_BYTES = 2e9
SLOW_S = 600.0


class Timers:
    """Wrap module attributes with wall-clock accumulators (name -> seconds, calls)."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)
        self._undo = []

    def wrap(self, module, attr: str, name: str):
        orig = getattr(module, attr)

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                self.seconds[name] += time.perf_counter() - t
                self.calls[name] += 1

        setattr(module, attr, timed)
        self._undo.append((module, attr, orig))

    def reset(self):
        self.seconds.clear()
        self.calls.clear()

    def restore(self):
        for module, attr, orig in reversed(self._undo):
            setattr(module, attr, orig)
        self._undo.clear()


def points_for(study, rows: int) -> tuple[int, int]:
    """The smallest grid resolution whose grid has >= rows points, and that grid's size."""
    from dse.grid import grid_axes
    p = 2
    while True:
        total = int(np.prod([v.size for _, v in grid_axes(study, p)], dtype=np.int64))
        if total >= rows:
            return p, total
        p += 1


def sweep_timers():
    """Timers on every phase of dse.grid.sweep (all looked up through module attributes)."""
    import dse.grid
    import dse.results.frame
    tm = Timers()
    tm.wrap(dse.grid, "evaluate_study", "evaluate (build_designs + evaluate)")
    tm.wrap(dse.results.frame, "_utc", "  of which timestamp columns (_utc)")
    tm.wrap(dse.grid, "results_frame", "results_frame (pandas DataFrame)")
    tm.wrap(dse.grid, "write_parquet", "write part files (write_parquet)")
    tm.wrap(dse.grid, "pareto_mask", "  of which pareto_mask (moocore)")
    tm.wrap(dse.grid, "pareto_ranks", "  of which pareto_ranks (moocore)")
    tm.wrap(dse.grid, "_write_pareto_flags", "Pareto pass: rank + re-read + rewrite parts")
    return tm


def vm_hwm_kib() -> int | None:
    """Peak RSS of this process's own address space (Linux /proc VmHWM), or None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def run_sweep(points: int, out: Path) -> dict:
    """One timed sweep in this process; wall time, phases, rows, disk bytes, peak RSS."""
    from dse.grid import sweep
    from dse.study import load_study
    study = load_study(STUDY)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tm = sweep_timers()
    t = time.perf_counter()
    res = sweep(study, points=points, out=out, progress=False)
    wall = time.perf_counter() - t
    tm.restore()
    return {"points": points, "rows": res.rows_written, "total": res.total_points, "parts": len(res.parts),
            "wall_s": wall, "disk_bytes": sum(p.stat().st_size for p in res.parts),
            "rss_before_kib": rss_before, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "vmhwm_kib": vm_hwm_kib(),
            "phases": dict(tm.seconds)}


def print_phases(r: dict) -> None:
    ph = r["phases"]
    top = [k for k in ph if not k.startswith("  ")]
    other = r["wall_s"] - sum(ph[k] for k in top)
    print(f"    {'phase':<48}{'s':>8}{'share':>8}")
    order = ["evaluate (build_designs + evaluate)", "results_frame (pandas DataFrame)",
             "  of which timestamp columns (_utc)", "write part files (write_parquet)",
             "Pareto pass: rank + re-read + rewrite parts", "  of which pareto_mask (moocore)",
             "  of which pareto_ranks (moocore)"]
    for k in order:
        if k in ph:
            print(f"    {k:<48}{ph[k]:>8.2f}{100 * ph[k] / r['wall_s']:>7.1f}%")
    print(f"    {'other (grid indices, objective arrays, ...)':<48}{other:>8.2f}{100 * other / r['wall_s']:>7.1f}%")


def bench_nsga2(n_trials: int) -> list[tuple]:
    import optuna  # noqa: F401  (imported before timing; its import time is printed)

    import dse.search as ds
    from dse.study import load_study
    study = load_study(STUDY)
    tm = Timers()
    tm.wrap(ds, "evaluate_study", "eval")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # sampler pinned to nsga2: this measures Optuna's overhead per trial (the default, auto,
        # adds a numpy pre-search first: benchmarks/bench_search_quality.py)
        ds.run_study(study, n_trials=64, sampler="nsga2", storage=":memory:", out=Path(tmp) / "warm.parquet",
                     progress=False)
        for label, storage in (("journal file (default)", str(Path(tmp) / "q.journal")), ("in-memory", ":memory:")):
            tm.reset()
            t = time.perf_counter()
            res = ds.run_study(study, n_trials=n_trials, sampler="nsga2", storage=storage,
                               out=Path(tmp) / f"q-{len(rows)}.parquet", progress=False)
            wall = time.perf_counter() - t
            rows.append((label, len(res.frame), wall, tm.seconds["eval"], tm.calls["eval"]))
    tm.restore()
    return rows


def child_main(points: int, out: str) -> int:
    print(json.dumps(run_sweep(points, Path(out))))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for the throughput sweep (b)")
    ap.add_argument("--big-rows", type=int, default=10_000_000, help="rows for the memory sweep (c)")
    ap.add_argument("--quick", action="store_true", help="(c) at 1,000,000 rows instead of --big-rows")
    ap.add_argument("--child-sweep", nargs=2, metavar=("POINTS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_sweep:
        return child_main(int(args.child_sweep[0]), args.child_sweep[1])
    from dse.study import load_study
    study = load_study(STUDY)
    big = 1_000_000 if args.quick else args.big_rows
    p_big, total_big = points_for(study, big)
    # (c) runs first, while this process is small: a child's ru_maxrss starts from its parent's
    # RSS at fork (Linux keeps the maximum across fork and execve), so a large parent would inflate it
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--child-sweep", str(p_big), str(Path(tmp) / "sweep")],
                              capture_output=True, text=True)
        outer = time.perf_counter() - t
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        print(f"FAIL: the sweep subprocess exited with {proc.returncode}", file=sys.stderr)
        return 1
    big_run = json.loads(proc.stdout.strip().splitlines()[-1])
    parent_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = []

    # ---- (a) NSGA-II ----
    t = time.perf_counter()
    import optuna
    t_import = time.perf_counter() - t
    print(f"(a) NSGA-II, {STUDY.name}, {args.trials:,} trials (population 64), optuna {optuna.__version__}")
    print(f"    optuna import {t_import:.2f} s and a 64-trial in-memory warm-up run first, untimed")
    print(f"    {'storage':<24}{'trials':>7}{'wall s':>9}{'eval s':>9}{'calls':>7}{'eval %':>8}{'trials/s':>10}")
    for label, n, wall, ev, calls in bench_nsga2(args.trials):
        share = 100 * ev / wall
        print(f"    {label:<24}{n:>7,}{wall:>9.2f}{ev:>9.3f}{calls:>7}{share:>7.2f}%{n / wall:>10,.0f}")
        results.append((f"NSGA-II eval share, {label}", f"{share:.2f}%", "< 5%", share < 5.0))
    print("    eval = dse.search.evaluate_study (build_designs + evaluate), incl. the final re-evaluation")

    # ---- (b) grid sweep throughput ----
    p, total = points_for(study, args.rows)
    print()
    print(f"(b) grid sweep, points={p}: {total:,} grid points (smallest points giving >= {args.rows:,})")
    with tempfile.TemporaryDirectory() as tmp:
        r = run_sweep(p, Path(tmp) / "sweep")
    print(f"    rows {r['rows']:,} in {r['parts']} parts; wall {r['wall_s']:.2f} s; "
          f"{r['rows'] / r['wall_s']:,.0f} points/s; {r['disk_bytes'] / 1e6:.1f} MB on disk")
    print_phases(r)

    # ---- (c) peak memory of a big sweep, in its own process (run above) ----
    r = big_run
    print()
    print(f"(c) grid sweep in a subprocess, points={p_big}: {total_big:,} grid points "
          f"(smallest points giving >= {big:,})" + ("  [--quick]" if args.quick else ""))
    rss = r["maxrss_kib"] * 1024
    print(f"    rows {r['rows']:,} in {r['parts']} parts; sweep wall {r['wall_s']:.1f} s "
          f"({r['rows'] / r['wall_s']:,.0f} points/s; process incl. start-up {outer:.1f} s)")
    hwm = f"{r['vmhwm_kib'] * 1024 / 1e9:.2f} GB" if r["vmhwm_kib"] else "n/a"
    print(f"    peak RSS (ru_maxrss) {r['maxrss_kib']:,} KiB = {rss / 1e9:.2f} GB; /proc VmHWM {hwm}; "
          f"after imports, before the sweep {r['rss_before_kib'] * 1024 / 1e9:.2f} GB "
          f"(parent at spawn <= {parent_kib * 1024 / 1e9:.2f} GB)")
    print(f"    disk {r['disk_bytes'] / 1e6:.1f} MB ({r['disk_bytes'] / r['rows']:.1f} bytes/row)")
    print_phases(r)
    if r["wall_s"] > SLOW_S:
        print(f"    SLOW: the sweep took {r['wall_s'] / 60:.1f} min (> {SLOW_S / 60:.0f} min); see the phases above")
    results.append((f"sweep peak RSS, {r['rows']:,} rows", f"{rss / 1e9:.2f} GB", "<= 2 GB", rss <= RSS_LIMIT_BYTES))

    return report(results, width=12)


if __name__ == "__main__":
    sys.exit(main())
