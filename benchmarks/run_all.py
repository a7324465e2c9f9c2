"""Run every benchmarks/bench_*.py in its own subprocess; exit 1 if any of them failed.

Run:  python benchmarks/run_all.py [--quick]

Each script's output is shown as it runs, then a summary of exit codes and wall times.
--quick runs bench_search.py's peak-memory sweep at 1,000,000 rows instead of 10,000,000, and
bench_versus_pinned.py (this tree against commit 5832b82, same run) at its smaller sizes: a 294,912-point
sweep, 300 evaluate_design calls and 1,000 trials instead of 2,370,816 points, 2,000 calls and 10,000 trials,
and bench_sweep_ranking.py on grids of under a million points, without its targets.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: extra arguments per script in --quick mode
QUICK_ARGS = {"bench_search.py": ["--quick"], "bench_versus_pinned.py": ["--quick"], "bench_sweep_ranking.py": ["--quick"]}
#: arguments always given: the full search-quality table takes about half an hour (run it by hand)
ALWAYS_ARGS = {"bench_search_quality.py": ["--quick"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="skip the 10M-point sweep (run a 1M one instead); smaller sizes against 5832b82")
    args = ap.parse_args(argv)
    scripts = sorted(HERE.glob("bench_*.py"))
    if not scripts:
        print(f"no bench_*.py in {HERE}", file=sys.stderr)
        return 1
    summary = []
    for script in scripts:
        extra = (QUICK_ARGS.get(script.name, []) if args.quick else []) + ALWAYS_ARGS.get(script.name, [])
        cmd = [sys.executable, str(script)] + extra
        print(f"==== python benchmarks/{' '.join([script.name] + extra)}", flush=True)
        t = time.perf_counter()
        rc = subprocess.run(cmd, cwd=HERE.parent).returncode
        summary.append((script.name, rc, time.perf_counter() - t))
        print(flush=True)
    print("==== summary")
    print(f"{'script':<22}{'seconds':>9}  result")
    for name, rc, sec in summary:
        print(f"{name:<22}{sec:>9.1f}  {'PASS' if rc == 0 else f'FAIL (exit {rc})'}")
    failed = [name for name, rc, _ in summary if rc != 0]
    if failed:
        print(f"FAIL: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("all benchmarks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
