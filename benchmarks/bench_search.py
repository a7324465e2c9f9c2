"""Time dse run on each storage and grid sweeps of studies/quickstart.yaml, and the peak memory of a big sweep.

Run:  python benchmarks/bench_search.py [--trials 10000] [--shared-trials 2000] [--big-rows 10000000] [--quick]
      python benchmarks/bench_search.py --search-only      # (a) alone

(a) run_study(quickstart, sampler nsga2, population and batch 64), whole call: --trials (10,000) in
    memory, then --shared-trials (2,000) on a journal file and, when DSE_TEST_PG_URL names a
    PostgreSQL database (.ci/postgres.sh starts one), on PostgreSQL (a fresh study name each run).
    Per row: wall time, the model's share (time inside dse.search.evaluate_study, i.e.
    build_designs + evaluate, wrapped with a timer; it includes the final re-evaluation of every
    trial for the Parquet file) and the bookkeeping per trial, (wall - model) / trials. One more
    in-memory row with the default sampler, auto (NSGA-II after a numpy pre-search), for reference.
    Target: 10,000 in-memory NSGA-II trials <= 12 s. Optuna is imported and a 64-trial
    in-memory run is done first, untimed.
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
SEARCH_TRIALS = 10_000
SEARCH_LIMIT_S = 12.0


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


def bench_run(n_trials: int, n_shared: int) -> list[tuple]:
    """(label, sampler, trials, wall s, CPU s, model s) per storage: in memory (nsga2 and auto), journal
    file, PostgreSQL when DSE_TEST_PG_URL is set."""
    import os
    import uuid

    import optuna  # noqa: F401  (imported before timing; its import time is printed)
    import yaml

    import dse.search as ds
    from dse.study import load_study, parse_study
    study = load_study(STUDY)
    tm = Timers()
    tm.wrap(ds, "evaluate_study", "eval")
    runs = [("in-memory", "nsga2", n_trials, ":memory:"), ("in-memory", "auto", n_trials, ":memory:")]
    pg = os.environ.get("DSE_TEST_PG_URL")
    with tempfile.TemporaryDirectory() as tmp:
        if n_shared:
            runs.append(("journal file", "nsga2", n_shared, str(Path(tmp) / "q.journal")))
        if n_shared and pg:
            runs.append(("PostgreSQL", "nsga2", n_shared, pg))
        ds.run_study(study, n_trials=64, sampler="nsga2", storage=":memory:", out=Path(tmp) / "warm.parquet",
                     progress=False)
        rows = []
        for label, sampler, n, storage in runs:
            s = study
            if label == "PostgreSQL":      # a fresh study each run: the database outlives this script
                raw = yaml.safe_load(STUDY.read_text())
                raw["name"] = f"bench-{uuid.uuid4().hex[:8]}"
                s = parse_study(raw, STUDY)
            tm.reset()
            t, cpu = time.perf_counter(), time.process_time()
            res = ds.run_study(s, n_trials=n, sampler=sampler, storage=storage,
                               out=Path(tmp) / f"q-{len(rows)}.parquet", progress=False)
            wall, cpu = time.perf_counter() - t, time.process_time() - cpu
            rows.append((label, sampler, len(res.frame), wall, cpu, tm.seconds["eval"]))
    tm.restore()
    if n_shared and not pg:
        rows.append(("PostgreSQL", "nsga2", 0, float("nan"), float("nan"), float("nan")))
    return rows


def search_part(args, results: list) -> None:
    """(a): print the table and add the target."""
    t = time.perf_counter()
    import optuna
    t_import = time.perf_counter() - t
    print(f"(a) dse run, {STUDY.name}, population and batch 64, optuna {optuna.__version__}")
    print(f"    optuna import {t_import:.2f} s and a 64-trial in-memory warm-up run first, untimed")
    print(f"    {'storage':<14}{'sampler':<8}{'trials':>7}{'wall s':>9}{'CPU s':>8}{'model s':>9}{'model %':>9}"
          f"{'bookkeeping ms/trial':>22}{'trials/s':>10}")
    for label, sampler, n, wall, cpu, ev in bench_run(args.trials, args.shared_trials):
        if not n:
            print(f"    {label:<14}{sampler:<8}  skipped: no server (set DSE_TEST_PG_URL; .ci/postgres.sh starts one)")
            continue
        print(f"    {label:<14}{sampler:<8}{n:>7,}{wall:>9.2f}{cpu:>8.2f}{ev:>9.3f}{100 * ev / wall:>8.2f}%"
              f"{1e3 * (wall - ev) / n:>22.3f}{n / wall:>10,.0f}")
        if label == "in-memory" and sampler == "nsga2":
            results.append((f"dse run, {n:,} in-memory NSGA-II trials", f"{wall:.2f} s",
                            f"<= {SEARCH_LIMIT_S:g} s", n >= SEARCH_TRIALS and wall <= SEARCH_LIMIT_S))
    print("    model = dse.search.evaluate_study (build_designs + evaluate), incl. the final re-evaluation;")
    print("    bookkeeping = (wall - model) / trials: Optuna, its storage, dse's loop and the Parquet file;")
    print("    CPU s = this process's CPU time (wall on a loaded machine includes waiting for a core)")


def child_main(points: int, out: str) -> int:
    print(json.dumps(run_sweep(points, Path(out))))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=SEARCH_TRIALS, help="in-memory trials of (a)")
    ap.add_argument("--shared-trials", type=int, default=2000, help="journal-file / PostgreSQL trials of (a); 0: none")
    ap.add_argument("--search-only", action="store_true", help="(a) alone")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for the throughput sweep (b)")
    ap.add_argument("--big-rows", type=int, default=10_000_000, help="rows for the memory sweep (c)")
    ap.add_argument("--quick", action="store_true", help="(c) at 1,000,000 rows instead of --big-rows")
    ap.add_argument("--child-sweep", nargs=2, metavar=("POINTS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_sweep:
        return child_main(int(args.child_sweep[0]), args.child_sweep[1])
    if args.search_only:
        results: list = []
        search_part(args, results)
        return report(results, width=12)
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

    # ---- (a) dse run per storage ----
    search_part(args, results)

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
