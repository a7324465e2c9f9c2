"""Time the serving curve: (design, concurrency) operating points per second on one core.

Run:  python benchmarks/bench_serving.py [--designs 4000] [--repeats 3]

(a) dse.model.serving.aggregated_points on --designs random H100-shaped designs (bandwidth, FLOP/s,
    prompt and output drawn as in bench_eval.py (b)), no draft, at the 18 concurrencies of
    serving.CONCURRENCY: designs x 18 points; median of --repeats calls after one untimed call.
    Target: >= 100,000 points per second.
(b) The same with a 1B draft model at alpha 0.8 and k = auto (k re-chosen at every concurrency):
    reported, no target (a speculative point costs its k candidates).
(c) The disaggregated deployments (serving.disaggregated_points: 18 concurrencies x 64 pool
    shapes, from one static evaluation per concurrency) and the whole SLA search
    (serving.sla_metrics, mode best): points of (a) per second, reported, no target.
Exits 1 if the target is missed.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _targets import report  # noqa: E402
from bench_eval import random_batch, workload  # noqa: E402

from dse.catalog.database import load_database  # noqa: E402
from dse.model import evaluate  # noqa: E402
from dse.model.serving import CONCURRENCY, aggregated_points, disaggregated_points, sla_metrics  # noqa: E402
from dse.workload.spec import Sla  # noqa: E402

TARGET_POINTS_S = 100_000


def timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    db = load_database()
    rng = np.random.default_rng(0)
    batch = random_batch(db, a.designs, 0, rng)
    spec_w = workload(db)
    plain_w = dataclasses.replace(spec_w, drafter=dataclasses.replace(spec_w.drafter, kind="none", label="none"))
    points = a.designs * CONCURRENCY.size
    results = []
    t = timed(lambda: aggregated_points(batch, plain_w, evaluate), a.repeats)
    rate = points / t
    print(f"(a) aggregated, no draft: {a.designs} designs x {CONCURRENCY.size} concurrencies in {t:.3f} s: "
          f"{rate:,.0f} points/s")
    results.append(("(a) aggregated points/s, no draft", f"{rate:,.0f}", f">= {TARGET_POINTS_S:,}", rate >= TARGET_POINTS_S))
    t = timed(lambda: aggregated_points(batch, spec_w, evaluate), a.repeats)
    print(f"(b) aggregated, 1B draft, k auto: {points / t:,.0f} points/s")
    t = timed(lambda: disaggregated_points(batch, plain_w, evaluate), a.repeats)
    print(f"(c) disaggregated, no draft (x 64 pool shapes each): {points / t:,.0f} points/s")
    sla = Sla(ttft_s=1.0, tpot_s=0.03)
    t = timed(lambda: sla_metrics(batch, plain_w, evaluate, sla), a.repeats)
    print(f"(c) the SLA search (aggregated and disaggregated), no draft: {a.designs / t:,.0f} designs/s, "
          f"{points / t:,.0f} points/s")
    return report(results)


if __name__ == "__main__":
    sys.exit(main())
