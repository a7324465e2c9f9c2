"""Time the model: one design through the API, a million designs in one call, and `dse eval`.

Run:  python benchmarks/bench_eval.py [--calls 200] [--rows 1000000] [--repeats 5] [--cli-runs 5]

(a) evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
    after warm-up, median of --calls calls: target <= 1 ms. Also (no target) the same call with a
    loaded Database passed in, and the raw dse.model.evaluate on length-1 arrays.
(b) dse.model.evaluate on --rows random designs (bandwidth, FLOP/s, batch, prompt, output drawn
    as in tests/model/test_evaluate_vector.py) in one call, on one core: the first (cold) call,
    then the median of --repeats further calls. Target at fixed k = 4: median >= 1,000,000
    design points per second. k = auto (k_max 8) is reported without a target, and so is the
    same number of rows cut into sweep-sized chunks of 131,072.
(c) `dse eval --hw h100-sxm --target llama-3.1-70b --dtype fp8 --draft llama-3.2-1b --alpha 0.8
    --json` as a subprocess, median wall time of --cli-runs runs after one untimed run: target
    < 1 s; and `python -X importtime` on the same command must show no optuna, pandas or
    matplotlib import.
(e) The draft as a knob: the rows of (b) (fixed k = 4) with a random draft each among six (no
    draft, three Llama draft models, prompt lookup, an early exit at layers 8-24: 22 groups),
    split by draft and evaluated per group with the acceptance (and its band) from the model:
    target >= 1,000,000 design points per second, as (b).
(f) A tree method's tree re-chosen per row (EAGLE-3: a chain, trees of 4-32 nodes, the published
    59) against the published tree alone, on --tree-rows random designs (batch 1-255, and batch 1,
    8, 32 or 128) and one search batch of 64: seconds and their ratio. No target.
(d) The study path against its floor: studies/quickstart.yaml's grid at --points (11: 814,572
    distinct designs of 1,054,152 grid points), in sweep chunks of 131,072, categorical knobs as
    grid indices. ns per design, min of --study-repeats passes, for dse.model.evaluate plain
    (every row, every k), with dedupe (latency terms once per distinct input row) and with dedupe
    and the k = auto bound (the default), and for evaluation.evaluate_study (build_designs +
    evaluate, the default path). The floor: the bytes of the result columns (every Metrics
    field, 8 bytes per design each) written once at the measured memcpy bandwidth (1 core, 256
    MB copies); also one elementwise numpy pass (a * b + c, float64) per design as a unit.
    Printed with the ratios; no target.
Exits 1 if a target is missed.
"""

from __future__ import annotations

import os

# one core for every numeric library: set before numpy is imported
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import fields as dataclass_fields  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _targets import report  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

from dse.api import evaluate_design, hardware_arrays  # noqa: E402
from dse.campaign.grid import DEFAULT_CHUNK, distinct_points, grid_axes  # noqa: E402
from dse.catalog.database import load_database  # noqa: E402
from dse.evaluation.designs import build_designs, evaluate_by_draft, evaluate_study  # noqa: E402
from dse.model import DesignBatch, Metrics, evaluate  # noqa: E402
from dse.study import open_study  # noqa: E402
from dse.workload.spec import (  # noqa: E402
    Workload,  # noqa: E402
    make_acceptance,
    parse_drafter,
)

API_KW = dict(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
CLI_ARGS = ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-70b", "--dtype", "fp8", "--draft", "llama-3.2-1b",
            "--alpha", "0.8", "--json"]
HEAVY = ("optuna", "pandas", "matplotlib")
SWEEP_CHUNK = 131_072        # dse.campaign.grid.DEFAULT_CHUNK


def random_batch(db, n: int, k: int, rng: np.random.Generator) -> DesignBatch:
    """n H100-shaped designs with random bandwidth, FLOP/s, batch, prompt and output; k fixed (0 = auto)."""
    dev, rt = db.device("h100-sxm"), db.runtime("graphs")
    hw = hardware_arrays(dev, rt, np.ones(n, dtype=int), "bf16")
    hw = type(hw)(**{**{f: getattr(hw, f) for f in hw.__slots__},
                     "mem_bw_bytes_s": rng.uniform(1e12, 8e12, n), "peak_flop_s": rng.uniform(1e14, 2e15, n)})
    return DesignBatch(target=hw, draft=hw, draft_on_chip=np.zeros(n, bool), draft_link_bw_bytes_s=0.0,
                       draft_link_latency_s=0.0, batch=rng.integers(1, 256, n),
                       prompt_tokens=rng.integers(1, 4096, n), output_tokens=rng.integers(1, 1024, n),
                       k=np.full(n, k, dtype=np.int64))


def workload(db) -> Workload:
    tgt = db.model("llama-3.1-8b")
    return Workload(target=tgt, drafter=parse_drafter("llama-3.2-1b", tgt, db), acceptance=make_acceptance(0.8),
                    k_max=8)


def draft_study(db, drafts):
    """A study of llama-3.1-8b whose draft is a knob over ``drafts`` ('early-exit' a range of layers)."""
    from dse.study import parse_study
    raw = {"name": "bench-drafts", "workload": {"target": "llama-3.1-8b", "k": 4, "task": "chat",
                                                "draft": [d if d != "early-exit" else {"early-exit": {"low": 8, "high": 24}}
                                                          for d in drafts]},
           "space": {"target_chip": {"device": "h100-sxm", "chips": [1, 2]}},
           "objectives": [{"metric": "spec_ms_per_token"}]}
    return parse_study(raw, "bench-drafts", db)


def time_calls(fn, calls: int, warmup: int) -> np.ndarray:
    for _ in range(warmup):
        fn()
    out = np.empty(calls)
    for i in range(calls):
        t = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t
    return out


def thread_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed: thread-pool report skipped"
    pools = threadpool_info()
    if not pools:
        return "threadpoolctl: no native thread pools loaded"
    return "threadpoolctl: " + "; ".join(f"{p.get('internal_api')} {p.get('num_threads')} thread(s)" for p in pools)


def dse_command() -> list[str]:
    script = Path(sys.executable).with_name("dse")
    if script.exists():
        return [str(script)]
    found = shutil.which("dse")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from dse.cli import main; sys.exit(main())"]


def heavy_imports(importtime_stderr: str) -> tuple[list[str], list[tuple[float, str]]]:
    """Heavy packages imported, and (cumulative ms, name) of every top-level import."""
    bad, top = set(), []
    for line in importtime_stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = line.split("|", 2)
        if not cum.strip().isdigit():
            continue                      # the header line
        mod = name.strip()
        if mod.split(".")[0] in HEAVY:
            bad.add(mod.split(".")[0])
        if not name.startswith("  "):      # importtime indents nested imports by two spaces per level
            top.append((int(cum) / 1e3, mod))
    return sorted(bad), sorted(top, reverse=True)


def quickstart_chunks(points: int):
    """The quickstart grid as the sweep evaluates it: (params with categorical knobs as axis
    indices, distinct designs) per chunk of DEFAULT_CHUNK grid points."""
    study, db, tech = open_study(Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml")
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = int(np.prod(shape))
    chunks = []
    for start in range(0, total, DEFAULT_CHUNK):
        idx = np.unravel_index(np.arange(start, min(total, start + DEFAULT_CHUNK)), shape)
        params = {k.name: i if k.kind == "cat" else vals[i] for (k, vals), i in zip(axes, idx)}
        keep = distinct_points(study, axes, idx, params, idx[0].size)
        chunks.append(({name: v[keep] for name, v in params.items()}, int(keep.sum())))
    return study, db, tech, total, chunks


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def study_floor(points: int, repeats: int) -> None:
    study, db, tech, total, chunks = quickstart_chunks(points)
    n = sum(m for _, m in chunks)
    print(f"(d) studies/quickstart.yaml grid, {points} points: {n:,} distinct designs of {total:,} grid points, "
          f"{len(chunks)} chunks; min of {repeats} passes")
    batches = [build_designs(study, p, m, db, tech).batch for p, m in chunks]
    w = study.workload
    rows = []
    for label, kw in (("dse.model.evaluate, plain (every row, every k)", dict(dedupe=False, k_bound=False)),
                      ("dse.model.evaluate, dedupe", dict(k_bound=False)),
                      ("dse.model.evaluate, dedupe + k bound (default)", {})):
        evaluate(batches[0], w, **kw)
        rows.append((label, best_of(lambda kw=kw: [evaluate(b, w, **kw) for b in batches], repeats)))
    batches.clear()
    rows.append(("evaluation.evaluate_study (build + evaluate)",
                 best_of(lambda: [evaluate_study(study, p, m, db, tech) for p, m in chunks], repeats)))
    # the floor: write every result column once at memcpy speed
    src = np.ones(32 * 2 ** 20)                   # 256 MB
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t_copy = best_of(lambda: np.copyto(dst, src), 5)
    bw = 2 * src.nbytes / t_copy                  # read + write
    a, b, c = (np.full(DEFAULT_CHUNK, x) for x in (1.5, 2.5, 3.5))
    out = np.empty_like(a)

    def one_pass():
        np.multiply(a, b, out=out)
        np.add(out, c, out=out)
    t_pass = best_of(lambda: [one_pass() for _ in range(100)], 5) / (100 * DEFAULT_CHUNK)
    n_cols = len(dataclass_fields(Metrics))
    floor = n_cols * 8 / bw
    print(f"    memcpy {bw / 1e9:.1f} GB/s (read + write); floor = {n_cols} result columns x 8 B written once "
          f"= {floor * 1e9:.0f} ns/design; one numpy pass a*b+c = {t_pass * 1e9:.2f} ns/design")
    print(f"{'path':<52}{'s':>8}{'ns/design':>11}{'x floor':>9}{'passes':>8}")
    for label, t in rows:
        per = t / n
        print(f"{label:<52}{t:>8.3f}{per * 1e9:>11.0f}{per / floor:>9.1f}{per / t_pass:>8.0f}")
    print("    passes = ns/design over one elementwise numpy pass; the machine may be shared: compare within one run")


def tree_choice(db, rows: int, repeats: int, rng: np.random.Generator) -> None:
    """(f): EAGLE-3 on llama-3.1-8b, the tree re-chosen per row (a chain, trees of 4-32 nodes and the
    published 59, dse.model.tree_choice) against the published tree alone (k auto up to its depth 6),
    on the rows of (b) at batch 1-255 and at batch 1, 8, 32 or 128, and on one search batch of 64."""
    import dataclasses
    tgt = db.model("llama-3.1-8b")
    d = parse_drafter("eagle3", tgt, db)
    w = Workload(target=tgt, drafter=d, acceptance=make_acceptance(0.75))
    published = dataclasses.replace(w, tree_nodes=59, k_max=6)
    chosen = dataclasses.replace(w, tree_nodes=59, tree_choices=d.tree_choices())
    print(f"(f) a tree method's tree re-chosen per row: EAGLE-3 (alpha 0.75) on llama-3.1-8b, random designs as (b); "
          f"min of {repeats} calls")
    print(f"{'rows':<44}{'published s':>12}{'re-chosen s':>12}{'ratio':>7}")
    for label, n, batches in ((f"{rows:,}, batch 1-255", rows, None), (f"{rows:,}, batch 1, 8, 32 or 128", rows,
                                                                        (1, 8, 32, 128)), ("64 (a search batch)", 64, None)):
        b = random_batch(db, n, 0, rng)
        if batches is not None:
            b = dataclasses.replace(b, batch=rng.choice(batches, n))
        reps = max(repeats, 20 if n < 1000 else 1)
        t = [best_of(lambda wl=wl, b=b: evaluate(b, wl), reps) for wl in (published, chosen)]
        print(f"{label:<44}{t[0]:>12.4f}{t[1]:>12.4f}{t[1] / t[0]:>7.2f}")
    print("    no target: the re-chosen tree evaluates up to six sizes, each tree where a bound says it may beat "
          "the chain")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cli-runs", type=int, default=5)
    ap.add_argument("--points", type=int, default=11, help="(d) grid points of studies/quickstart.yaml")
    ap.add_argument("--study-repeats", type=int, default=3)
    ap.add_argument("--tree-rows", type=int, default=100_000, help="(f) rows of the tree-choice comparison")
    args = ap.parse_args(argv)
    results = []          # (check, measured text, target text, ok)

    # ---- (a) one design ----
    db = load_database()
    w = workload(db)
    api = time_calls(lambda: evaluate_design(**API_KW), args.calls, warmup=20)
    api_db = time_calls(lambda: evaluate_design(**API_KW, db=db), args.calls, warmup=20)
    one = random_batch(db, 1, 4, np.random.default_rng(1))
    raw = time_calls(lambda: evaluate(one, w), args.calls, warmup=20)
    print(f"(a) one design, {args.calls} calls after 20 warm-up calls (ms)")
    print(f"{'call':<52}{'median':>8}{'p10':>8}{'p90':>8}")
    for name, t in (("evaluate_design(...)  [loads the database each call]", api),
                    ("evaluate_design(..., db=db)", api_db),
                    ("dse.model.evaluate, length-1 arrays, k=4", raw)):
        p10, med, p90 = np.percentile(t, [10, 50, 90]) * 1e3
        print(f"{name:<52}{med:>8.3f}{p10:>8.3f}{p90:>8.3f}")
    med_api = float(np.median(api)) * 1e3
    results.append(("evaluate_design median", f"{med_api:.3f} ms", "<= 1 ms", med_api <= 1.0))

    # ---- (b) a million designs in one call, one core ----
    print()
    print(f"(b) dse.model.evaluate on {args.rows:,} designs in one call, one core")
    print(f"    OMP/OPENBLAS/MKL_NUM_THREADS = 1; {thread_info()}")
    rng = np.random.default_rng(0)
    print(f"{'k':<28}{'build s':>9}{'cold s':>9}{'median s':>10}{'min s':>8}{'median pts/s':>15}")
    tput = {}
    for label, k in (("fixed k=4", 4), ("auto (k_max 8)", 0)):
        t = time.perf_counter()
        big = random_batch(db, args.rows, k, rng)
        t_build = time.perf_counter() - t
        t = time.perf_counter()
        evaluate(big, w)
        cold = time.perf_counter() - t
        reps = time_calls(lambda b=big: evaluate(b, w), args.repeats, warmup=0)
        med = float(np.median(reps))
        tput[k] = args.rows / med
        print(f"{label:<28}{t_build:>9.3f}{cold:>9.3f}{med:>10.3f}{reps.min():>8.3f}{tput[k]:>15,.0f}")
        del big
    n_chunks = -(-args.rows // SWEEP_CHUNK)
    chunks = [random_batch(db, min(SWEEP_CHUNK, args.rows - i * SWEEP_CHUNK), 4, rng) for i in range(n_chunks)]
    for c in chunks[:1]:
        evaluate(c, w)
    reps = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        for c in chunks:
            evaluate(c, w)
        reps.append(time.perf_counter() - t)
    med = statistics.median(reps)
    print(f"{f'fixed k=4, {n_chunks} x {SWEEP_CHUNK:,} rows':<28}{'':>9}{'':>9}{med:>10.3f}{min(reps):>8.3f}"
          f"{args.rows / med:>15,.0f}")
    print("    cold = the first call (fresh memory pages); median/min over the next "
          f"{args.repeats} calls; targets use the median")
    del chunks
    results.append(("evaluate throughput, fixed k", f"{tput[4]:,.0f} pts/s", ">= 1,000,000 pts/s", tput[4] >= 1e6))

    # ---- (e) the draft as a knob: the rows split by draft, each group under its own Workload ----
    print()
    drafts = ("none", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "ngram", "early-exit")
    study = draft_study(db, drafts)
    print(f"(e) the draft as a knob: {args.rows:,} random designs as (b), fixed k=4, drafts {', '.join(drafts)} "
          "(early exit at layers 8-24), acceptance from the model with its band, one core")
    big = random_batch(db, args.rows, 4, rng)
    codes = rng.integers(0, len(drafts), args.rows)
    layers = rng.integers(8, 25, args.rows)
    evaluate_by_draft(big, study, codes, drafts, layers)
    reps = time_calls(lambda b=big: evaluate_by_draft(b, study, codes, drafts, layers), args.repeats, warmup=0)
    t_one = time_calls(lambda b=big: evaluate(b, w), max(2, args.repeats // 2), warmup=0)
    med = float(np.median(reps))
    print(f"    median {med:.3f} s: {args.rows / med:,.0f} pts/s ({med / float(np.median(t_one)):.2f}x one Workload's "
          f"time on the same rows in this run)")
    del big
    results.append(("evaluate throughput, draft as a knob", f"{args.rows / med:,.0f} pts/s", ">= 1,000,000 pts/s",
                    args.rows / med >= 1e6))

    # ---- (f) a tree method's tree re-chosen per row, against its published tree on the same rows ----
    print()
    tree_choice(db, args.tree_rows, args.repeats, rng)

    # ---- (d) the study path against its floor ----
    print()
    study_floor(args.points, args.study_repeats)

    # ---- (c) `dse eval` from the shell ----
    print()
    cmd = dse_command() + CLI_ARGS
    print(f"(c) {' '.join(['dse'] + CLI_ARGS)}")
    print(f"    as a subprocess ({cmd[0]}): one untimed run, then {args.cli_runs} timed runs")
    first = subprocess.run(cmd, capture_output=True, text=True)
    if first.returncode != 0:
        print(first.stderr, file=sys.stderr)
        print("FAIL: dse eval exited with", first.returncode, file=sys.stderr)
        return 1
    record = json.loads(first.stdout)
    walls = []
    for _ in range(args.cli_runs):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - t)
    wall = statistics.median(walls)
    print(f"    fits={record['fits']} k={record['k']} spec_ms_per_token={record['spec_ms_per_token']:.3f}")
    print(f"    wall s: median {wall:.3f}, min {min(walls):.3f}, max {max(walls):.3f}")
    results.append(("dse eval wall time (median)", f"{wall:.3f} s", "< 1 s", wall < 1.0))
    script = cmd[1:] if cmd[0] == sys.executable else cmd       # run the console script under this python
    imp = subprocess.run([sys.executable, "-X", "importtime"] + script, capture_output=True, text=True)
    bad, top = heavy_imports(imp.stderr)
    print("    python -X importtime, largest top-level imports (cumulative ms): "
          + ", ".join(f"{name} {ms:.0f}" for ms, name in top[:5]))
    print(f"    optuna / pandas / matplotlib imported: {', '.join(bad) if bad else 'none'}")
    results.append(("dse eval imports no optuna/pandas/matplotlib", ", ".join(bad) or "none", "none",
                    imp.returncode == 0 and not bad))

    return report(results, width=20)


if __name__ == "__main__":
    sys.exit(main())
