"""Scale-out throughput: trials per second and the hypervolume reached for the same total budget,
with 1, 2 and 4 worker processes, as independent array tasks (in-memory studies), as one shared
study on a journal file, and on PostgreSQL (when DSE_TEST_PG_URL is set; skipped otherwise).

Run:  python benchmarks/bench_scaleout.py [--budget 200]

Each row is one wall-clock measurement of `dse run` processes started together (process start
and the final Parquet write included). The hypervolume of every row uses one reference point:
the nadir of all rows' feasible designs pushed out by 10% of each range.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pandas as pd
import yaml

import dse.results.analysis as da

ROOT = Path(__file__).resolve().parent.parent
DSE = str(Path(sys.executable).with_name("dse"))


def study_file(d: Path, budget: int) -> Path:
    raw = yaml.safe_load((ROOT / "studies" / "quickstart.yaml").read_text())
    raw["name"] = f"bench-{uuid.uuid4().hex[:8]}"
    raw["search"].update(n_trials=budget, batch_size=25)
    raw["output"] = str(d / "q.parquet")
    p = d / "quick.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def run(mode: str, workers: int, budget: int, pg: str | None) -> tuple[float, pd.DataFrame]:
    d = Path(tempfile.mkdtemp(prefix="dse-bench-"))
    try:
        p = study_file(d, budget)
        if mode == "tasks":
            cmds = [[DSE, "run", str(p), "--task", f"{i}/{workers}", "--n-trials", str(budget // workers),
                     "--out", str(d / "tasks"), "--quiet"] for i in range(workers)]
        else:
            url = f"journal:{d / 'shared.journal'}" if mode == "journal" else pg
            cmds = [[DSE, "run", str(p), "--storage", url, "--out", str(d / f"w{i}.parquet"), "--quiet"]
                    for i in range(workers)]
        t0 = time.perf_counter()
        procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in cmds]
        codes = [pr.wait() for pr in procs]
        wall = time.perf_counter() - t0
        if any(codes):
            raise SystemExit(f"{mode} x{workers}: exit codes {codes}")
        if mode == "tasks":
            df = da.load_results(d / "tasks")
        else:
            name = yaml.safe_load(p.read_text())["name"]
            subprocess.run([DSE, "export", "--storage", url, "--study", name, "--out", str(d / "all.parquet")],
                           check=True, stdout=subprocess.DEVNULL)
            df = da.load_results(d / "all.parquet")
        return wall, df
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=200, help="total trials per row (default 200)")
    args = ap.parse_args(argv)
    pg = os.environ.get("DSE_TEST_PG_URL")
    modes = ["tasks", "journal"] + (["postgres"] if pg else [])
    if not pg:
        print("postgres rows skipped: set DSE_TEST_PG_URL=postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB")
    rows, frames = [], []
    for mode in modes:
        for w in (1, 2, 4):
            wall, df = run(mode, w, args.budget, pg)
            rows.append((mode, w, len(df), wall))
            frames.append(df)
            print(f"{mode:<9} workers={w}  {len(df)} trials in {wall:6.1f} s  {len(df) / wall:6.1f} trials/s",
                  flush=True)
    union = pd.concat(frames, ignore_index=True)
    union.attrs = frames[0].attrs
    ref = da.hypervolume_reference(union)
    print("\n| storage | workers | trials | wall s | trials/s | hypervolume |\n|---|---|---|---|---|---|")
    for (mode, w, n, wall), df in zip(rows, frames):
        df.attrs = frames[0].attrs
        print(f"| {mode} | {w} | {n} | {wall:.1f} | {n / wall:.1f} | {da.hypervolume(df, reference=ref):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
