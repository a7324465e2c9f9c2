"""Time dse.results.analysis on a 1,000,000-row synthetic sweep (10 part files, 3 objectives).

Run:  python benchmarks/bench_analysis.py [--rows N] [--budget SECONDS]
Writes the dataset into a temp dir, then times load_results + front + ranks + hypervolume and
exits 1 if their total exceeds the budget (default 10 s). Writing the data is not timed. Also
printed (no target): load_results(columns=objectives + feasible) and front_of (part by part, full
rows for the front only), the streaming path of `dse pareto`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dse.results.analysis as da  # noqa: E402
from dse.results.store import SCHEMA_VERSION  # noqa: E402

OBJECTIVES = [{"metric": "spec_ms_per_token", "direction": "minimize"},
              {"metric": "cost_usd", "direction": "minimize"},
              {"metric": "tokens_per_s", "direction": "maximize"}]



def timed(fn, *args):
    """(fn(*args), seconds it took)."""
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t

def make_part(rng: np.random.Generator, start: int, n: int, meta: bytes) -> pa.Table:
    """A synthetic sweep chunk with trade-offs between latency, cost and throughput."""
    bw = rng.uniform(1.0, 8.0, n)
    chips = rng.integers(1, 9, n)
    cap = rng.choice([48.0, 80.0, 96.0, 141.0, 192.0], n)
    batch = rng.choice([1, 4, 16, 64], n)
    k = rng.integers(1, 9, n)
    noise = rng.lognormal(0.0, 0.08, (n, 3))
    lat = 60.0 / (bw * chips) ** 0.85 * (1 + 0.01 * batch) * noise[:, 0]
    cost = (2500.0 * bw + 40.0 * cap) * chips * noise[:, 1]
    tps = batch * 1000.0 / lat * (1 + 0.05 * k) * noise[:, 2]
    fits = cap * chips > rng.uniform(40, 300, n)      # ~17% do not fit
    feasible = fits & (rng.random(n) > 0.02)         # 2% fail a constraint: ~19% infeasible
    lat = np.where(fits, lat, np.nan)
    schema = pa.schema([
        ("study", pa.string()), ("trial", pa.int64()), ("state", pa.string()),
        ("params_mem_bw_tb_s", pa.float64()), ("params_num_chips", pa.int64()),
        ("params_memory_capacity_gb", pa.float64()), ("params_batch", pa.int64()),
        ("params_k", pa.int64()), ("spec_ms_per_token", pa.float64()),
        ("cost_usd", pa.float64()), ("tokens_per_s", pa.float64()),
        ("fits", pa.bool_()), ("feasible", pa.bool_())], metadata={b"dse": meta})
    return pa.table({
        "study": pa.array(["bench"] * n), "trial": np.arange(start, start + n),
        "state": pa.array(["COMPLETE"] * n), "params_mem_bw_tb_s": bw,
        "params_num_chips": chips, "params_memory_capacity_gb": cap, "params_batch": batch,
        "params_k": k, "spec_ms_per_token": lat, "cost_usd": cost, "tokens_per_s": tps,
        "fits": fits, "feasible": feasible}, schema=schema)


def write_dataset(root: Path, rows: int, parts: int = 10) -> None:
    meta = json.dumps({"schema_version": SCHEMA_VERSION, "dse_version": "bench", "objectives": OBJECTIVES,
                       "constraints": [], "tech_fingerprint": "bench",
                       "study": {"name": "bench", "workload": {}, "objectives": OBJECTIVES}
                       }).encode()
    rng = np.random.default_rng(0)
    per = rows // parts
    for p in range(parts):
        n = per if p < parts - 1 else rows - per * (parts - 1)
        pq.write_table(make_part(rng, p * per, n, meta), root / f"part-{p:03d}.parquet")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--budget", type=float, default=10.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sweep"
        root.mkdir()
        t = time.perf_counter()
        write_dataset(root, args.rows)
        t_write = time.perf_counter() - t

        times = {}
        df, times["load_results"] = timed(da.load_results, root)
        f, times["front"] = timed(da.front, df)
        r, times["ranks"] = timed(da.ranks, df)
        hv, times["hypervolume"] = timed(da.hypervolume, df)
        hist, t_hist = timed(da.hypervolume_history, df)
        few, t_cols = timed(da.load_results, root, [o["metric"] for o in OBJECTIVES] + ["feasible"])
        fo, t_front_of = timed(da.front_of, root)
        assert fo["trial"].tolist() == f["trial"].tolist(), "front_of differs from front"

    total = sum(times.values())
    n_ok = int(da.feasible_mask(df).sum())
    print(f"rows {len(df):,} in 10 part files; feasible {n_ok:,} "
          f"({100 * (1 - n_ok / len(df)):.1f}% infeasible); front {len(f):,}; "
          f"fronts {int(r.max()) + 1}; hypervolume {hv:.6g}")
    print(f"(untimed: write {t_write:.2f} s; hypervolume_history, {len(hist)} checkpoints, "
          f"{t_hist:.2f} s)")
    print(f"(untimed: load_results(columns=3 objectives + feasible) {t_cols:.2f} s, "
          f"{few.memory_usage(deep=True).sum() / 1e6:.0f} MB against {df.memory_usage(deep=True).sum() / 1e6:.0f} MB; "
          f"front_of, part by part, {t_front_of:.2f} s, the same {len(fo):,} rows as front)")
    print(f"{'step':<14}{'seconds':>9}")
    for name, sec in times.items():
        print(f"{name:<14}{sec:>9.3f}")
    print(f"{'total':<14}{total:>9.3f}   budget {args.budget:.1f} s")
    if total > args.budget:
        print("FAIL: over budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
