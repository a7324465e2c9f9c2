"""Does sampler auto try every level of every choice knob? (every categorical value, both states of the draft chip)

Run:  python benchmarks/bench_knob_levels.py [--trials 1000] [--seeds 0] [--studies PATH ...]

For every shipped study (studies/*.yaml) and benchmark study (benchmarks/studies/*.yaml), or the
files given, runs sampler auto (in-memory storage) and lists the levels (dse.search.levels: a
choice of a knob given as a list, where the knob acts on the design) that no trial of the run
tries, and per study the levels the run's feasible front holds. Exits 1 when a level is never
tried. tests/test_knob_levels.py checks a small budget on a few of them; this checks them all.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _targets import report  # noqa: E402
from search_quality_fronts import rows_of  # noqa: E402

from dse.search.levels import levels, untried  # noqa: E402
from dse.search.runner import run_study  # noqa: E402
from dse.study import open_study  # noqa: E402


def study_files() -> list[Path]:
    return sorted((ROOT / "studies").glob("*.yaml")) + sorted((ROOT / "benchmarks" / "studies").glob("*.yaml"))


def check(path: Path, trials: int, seed: int, tmp: Path) -> dict:
    """One run: the study's levels, those never tried, those on the feasible front, CPU seconds."""
    study, _, _ = open_study(path)
    c = time.process_time()
    df = run_study(study, n_trials=trials, sampler="auto", seed=seed, storage=":memory:",
                   out=tmp / f"{study.name}-{seed}.parquet", progress=False).frame
    cpu = time.process_time() - c
    rows = rows_of(df, study)
    front = rows_of(df[df["is_pareto"].fillna(False).astype(bool)], study)
    all_levels = levels(study)
    missed = untried(study, rows)
    on_front = len(all_levels) - len(untried(study, front))
    return {"name": study.name, "levels": len(all_levels), "missed": missed, "on_front": on_front, "cpu_s": cpu,
            "trials": len(df)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--studies", nargs="+", type=Path, default=None, help="study files (default: all shipped ones)")
    args = ap.parse_args()
    checks = []
    with tempfile.TemporaryDirectory() as tmpdir:
        for path in args.studies or study_files():
            for seed in args.seeds:
                r = check(path, args.trials, seed, Path(tmpdir))
                print(f"{r['name']:<22} seed {seed}: {r['levels']:3d} levels, {len(r['missed'])} never tried, "
                      f"{r['on_front']} on the front; {r['trials']} trials, {r['cpu_s']:.1f} CPU s", flush=True)
                for name, v in r["missed"]:
                    print(f"    never tried: {name} = {v}")
                checks.append((f"{r['name']} seed {seed}, levels never tried", str(len(r["missed"])), "0",
                               not r["missed"]))
    return report(checks, width=10)


if __name__ == "__main__":
    sys.exit(main())
