"""How close does each search get to the best known front? (issue 11, item 4)

Run:  python benchmarks/bench_search_quality.py [--studies quickstart draft-chip] [--seeds 0 1 2]
          [--trials 250 500 1000 2000] [--samplers auto nsga2 nsga3 tpe random qmc gp] [--quick]

The full run takes about 20 minutes on 2 cores (TPE is most of it); --quick (auto and nsga2 at
1,000 trials, about 1 minute, what benchmarks/run_all.py runs) writes to the temp folder.

For each shipped study (quickstart, draft-chip):

- the best known front: a dense grid (--grid-points per continuous knob, every distinct design,
  evaluated in numpy chunks) united with the feasible rows of every run below;
- each sampler at each budget (trials) and seed: ``dse.run_study`` with ':memory:' storage, its
  feasible rows' front; hypervolume ratio = HV(run) / HV(best known), reference point 1.1 x the
  best known front's nadir (every shipped objective is minimised and positive); the feasible
  fraction of its trials; its wall time. Samplers other than auto are run once at the largest
  budget and cut at each smaller one (trial numbers below the budget: the same trials a shorter
  run asks, but for the last partial batch); auto runs at each budget, because its seeds scale
  with the budget. gp is skipped when PyTorch is not installed;
- a grid of equal cost: the densest grid with no more distinct designs than the budget.

Writes docs/search-quality.json, prints a table (per study, sampler, budget, seed) and draws
docs/img/search-quality.png (ratio against trials, mean over seeds, the band min..max).
Target (the issue's 'Done means'): sampler auto at 1,000 trials >= 0.99 on quickstart and
>= 0.98 on draft-chip, for every seed. Exits 1 if missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _targets import report  # noqa: E402

from dse.grid import distinct_points, grid_axes  # noqa: E402
from dse.pareto import hypervolume, pareto_mask  # noqa: E402
from dse.presearch import score  # noqa: E402
from dse.search import run_study  # noqa: E402
from dse.study import open_study  # noqa: E402

TARGETS = {"quickstart": 0.99, "draft-chip": 0.98}
GRID_POINTS = {"quickstart": 13, "draft-chip": 9}


def grid_front(study, db, tech, points: int, chunk: int = 250_000) -> tuple[np.ndarray, int]:
    """Feasible front of the grid (objective values) and its number of distinct designs."""
    dirs = [o.direction for o in study.objectives]
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = int(np.prod(shape, dtype=np.int64))
    front, designs = np.zeros((0, len(dirs))), 0
    for start in range(0, total, chunk):
        flat = np.arange(start, min(total, start + chunk), dtype=np.int64)
        idx = np.unravel_index(flat, shape)
        params = {k.name: v[i] for (k, v), i in zip(axes, idx)}
        keep = distinct_points(study, axes, idx, params, flat.size)
        params = {k: v[keep] for k, v in params.items()}
        n = int(keep.sum())
        designs += n
        if not n:
            continue
        vals, feas = score(study, params, n, db, tech)
        both = np.concatenate([front, vals[feas]])
        front = both[pareto_mask(both, dirs)]
    return front, designs


def grid_designs(study, points: int) -> int:
    """Distinct designs of a grid, counted without evaluating it."""
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = int(np.prod(shape, dtype=np.int64))
    count = 0
    for start in range(0, total, 1_000_000):
        flat = np.arange(start, min(total, start + 1_000_000), dtype=np.int64)
        idx = np.unravel_index(flat, shape)
        params = {k.name: v[i] for (k, v), i in zip(axes, idx)}
        count += int(distinct_points(study, axes, idx, params, flat.size).sum())
    return count


def equal_cost_points(study, budget: int) -> int:
    """The densest grid (points per continuous knob) with at most ``budget`` distinct designs."""
    best = 2
    for p in range(2, 40):
        if grid_designs(study, p) > budget:
            break
        best = p
    return best


def run_front(study, sampler: str, seed: int, n: int, tmp: Path) -> dict:
    t = time.perf_counter()
    res = run_study(study, n_trials=n, sampler=sampler, seed=seed, storage=":memory:",
                    out=tmp / f"{study.name}-{sampler}-{seed}-{n}.parquet", progress=False)
    wall = time.perf_counter() - t
    df = res.frame
    objs = [o.metric for o in study.objectives]
    return {"trial": df["trial"].to_numpy(), "feasible": df["feasible"].to_numpy(bool),
            "values": df[objs].to_numpy(np.float64, na_value=np.nan), "wall_s": wall}


def cut(run: dict, n: int) -> tuple[np.ndarray, float]:
    """Feasible objective values among the first n trials, and the feasible fraction."""
    m = run["trial"] < n
    ok = m & run["feasible"] & np.isfinite(run["values"]).all(axis=1)
    return run["values"][ok], float(run["feasible"][m].mean())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", nargs="+", default=list(TARGETS))
    ap.add_argument("--samplers", nargs="+", default=["auto", "nsga2", "nsga3", "tpe", "random", "qmc", "gp"])
    ap.add_argument("--trials", nargs="+", type=int, default=[250, 500, 1000, 2000])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--grid-points", type=int, default=None, help="dense grid resolution (default per study)")
    ap.add_argument("--quick", action="store_true", help="auto and nsga2 only, 1,000 trials, seeds 0 1 2")
    ap.add_argument("--out", default=None, help="JSON results (default: docs/search-quality.json; "
                    "with --quick, the temp folder)")
    ap.add_argument("--plot", default=None, help="PNG (default: docs/img/search-quality.png; with --quick, the temp folder)")
    ap.add_argument("--from-json", action="store_true", help="only redraw the plot and tables from --out")
    args = ap.parse_args()
    where = Path(tempfile.gettempdir()) if args.quick else ROOT / "docs"
    args.out = args.out or str(where / "search-quality.json")
    args.plot = args.plot or str(where / ("search-quality.png" if args.quick else "img/search-quality.png"))
    if args.from_json:
        results = json.loads(Path(args.out).read_text())
        plot(results, Path(args.plot))
        print(markdown(results))
        return 0
    if args.quick:
        args.samplers, args.trials = ["auto", "nsga2"], [1000]
    samplers = list(args.samplers)
    if "gp" in samplers:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("gp: skipped (PyTorch is not installed)")
            samplers.remove("gp")
    budgets = sorted(args.trials)
    results, checks = {"studies": {}}, []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name in args.studies:
            study, db, tech = open_study(ROOT / "studies" / f"{name}.yaml")
            dirs = [o.direction for o in study.objectives]
            assert all(d == "minimize" for d in dirs), "reference 1.1 x nadir assumes minimised objectives"
            pts = args.grid_points or GRID_POINTS.get(name, 9)
            t = time.perf_counter()
            dense, dense_n = grid_front(study, db, tech, pts)
            print(f"{name}: dense grid {pts} points per knob, {dense_n:,} designs, front {len(dense)} "
                  f"({time.perf_counter() - t:.1f} s)", flush=True)
            runs: dict[tuple, dict] = {}
            for sampler in samplers:
                for seed in args.seeds:
                    for n in (budgets if sampler == "auto" else [budgets[-1]]):
                        runs[(sampler, seed, n)] = run_front(study, sampler, seed, n, tmp)
                        print(f"  {sampler:6s} seed {seed} {n:5d} trials: {runs[(sampler, seed, n)]['wall_s']:.1f} s",
                              flush=True)
            grids = {}
            for n in budgets:
                p = equal_cost_points(study, n)
                front, count = grid_front(study, db, tech, p)
                grids[n] = {"points": p, "designs": count, "front": front}
            union = np.concatenate([dense] + [cut(r, n)[0] for (_, _, n), r in runs.items()]
                                   + [g["front"] for g in grids.values()])
            best = union[pareto_mask(union, dirs)]
            ref = 1.1 * best.max(axis=0)
            hv_best = hypervolume(best, dirs, ref)
            rows = []
            for sampler in samplers:
                for n in budgets:
                    for seed in args.seeds:
                        r = runs[(sampler, seed, n)] if sampler == "auto" else runs[(sampler, seed, budgets[-1])]
                        vals, feas = cut(r, n)
                        rows.append({"sampler": sampler, "trials": n, "seed": seed,
                                     "hv_ratio": hypervolume(vals, dirs, ref) / hv_best if len(vals) else 0.0,
                                     "feasible_fraction": feas,
                                     "wall_s": r["wall_s"] if sampler == "auto" or n == budgets[-1] else None})
            for n, g in grids.items():
                rows.append({"sampler": f"grid ({g['points']} points)", "trials": n, "seed": None,
                             "designs": g["designs"], "hv_ratio": hypervolume(g["front"], dirs, ref) / hv_best,
                             "feasible_fraction": None, "wall_s": None})
            rows.append({"sampler": f"dense grid ({pts} points)", "trials": dense_n, "seed": None,
                         "hv_ratio": hypervolume(dense, dirs, ref) / hv_best, "feasible_fraction": None,
                         "wall_s": None})
            results["studies"][name] = {"reference": ref.tolist(), "hv_best": hv_best, "best_front_size": len(best),
                                        "dense_grid": {"points": pts, "designs": dense_n}, "rows": rows}
            print(f"\n{name}: best known front {len(best)} points, reference {np.round(ref, 3).tolist()}")
            print(f"{'sampler':<22}{'trials':>7}{'seed':>6}{'HV ratio':>10}{'feasible':>10}{'wall s':>8}")
            for r in rows:
                print(f"{r['sampler']:<22}{r['trials']:>7}{'' if r['seed'] is None else r['seed']:>6}"
                      f"{r['hv_ratio']:>10.4f}{'' if r['feasible_fraction'] is None else round(r['feasible_fraction'], 3):>10}"
                      f"{'' if r['wall_s'] is None else round(r['wall_s'], 1):>8}")
            if name in TARGETS and "auto" in samplers and 1000 in budgets:
                for r in rows:
                    if r["sampler"] == "auto" and r["trials"] == 1000:
                        checks.append((f"{name} auto 1000 trials seed {r['seed']}", f"{r['hv_ratio']:.4f}",
                                       f">= {TARGETS[name]}", r["hv_ratio"] >= TARGETS[name]))
    Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    plot(results, Path(args.plot))
    print(markdown(results))
    return report(checks)


def markdown(results: dict) -> str:
    """Per study: HV ratio mean (min-max over seeds) per sampler and budget, the feasible
    fraction and wall time at the largest budget; then every seed of every run."""
    out = []
    for name, st in results["studies"].items():
        rows = st["rows"]
        budgets = sorted({r["trials"] for r in rows if not r["sampler"].startswith("dense")})
        out += [f"### {name}", "",
                f"Best known front: {st['best_front_size']} points (dense grid of {st['dense_grid']['points']} points "
                f"per knob, {st['dense_grid']['designs']:,} designs, united with every run); reference point "
                f"{', '.join(f'{v:.4g}' for v in st['reference'])} (1.1 x its nadir).", "",
                "| sampler | " + " | ".join(f"{n:,} trials" for n in budgets) + f" | feasible at {budgets[-1]:,} |"
                " wall s at " + f"{budgets[-1]:,} |",
                "| --- |" + " ---: |" * (len(budgets) + 2)]
        for s in dict.fromkeys(r["sampler"] for r in rows):
            mine = [r for r in rows if r["sampler"] == s]
            if s.startswith("dense"):
                continue
            cells = []
            for n in budgets:
                v = [r["hv_ratio"] for r in mine if r["trials"] == n]
                if not v:
                    cells.append("")
                elif len(v) == 1:
                    cells.append(f"{v[0]:.4f}" + (f" ({mine[budgets.index(n)]['designs']:,} designs)"
                                                  if s.startswith("grid") else ""))
                else:
                    cells.append(f"{np.mean(v):.4f} ({min(v):.4f}-{max(v):.4f})")
            last = [r for r in mine if r["trials"] == budgets[-1]]
            feas = [r["feasible_fraction"] for r in last if r["feasible_fraction"] is not None]
            wall = [r["wall_s"] for r in last if r["wall_s"] is not None]
            label = "grid of equal cost" if s.startswith("grid") else s
            out.append(f"| {label} | " + " | ".join(cells) + f" | {np.mean(feas):.2f} |" if feas else
                       f"| {label} | " + " | ".join(cells) + " | - |")
            out[-1] += f" {np.mean(wall):.1f} |" if wall else " - |"
        dense = next(r for r in rows if r["sampler"].startswith("dense"))
        out += ["", f"The dense grid alone: {dense['hv_ratio']:.4f}.", "",
                "Every seed, HV ratio: " + "; ".join(
                    f"{s} {n:,}: " + ", ".join(f"{r['hv_ratio']:.4f}" for r in rows
                                               if r["sampler"] == s and r["trials"] == n)
                    for s in dict.fromkeys(r["sampler"] for r in rows) if not s.startswith(("grid", "dense"))
                    for n in budgets) + ".", ""]
    return "\n".join(out)


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    studies = results["studies"]
    fig, axes = plt.subplots(1, len(studies), figsize=(6.2 * len(studies), 4.4), squeeze=False)
    markers = "osD^vP*X"
    for ax, (name, st) in zip(axes[0], studies.items()):
        samplers = [s for s in dict.fromkeys(r["sampler"] for r in st["rows"]) if not s.startswith("dense")]
        for i, s in enumerate(samplers):
            rows = [r for r in st["rows"] if r["sampler"] == s]
            ns = sorted({r["trials"] for r in rows})
            if s.startswith("grid"):
                y = [next(r["hv_ratio"] for r in rows if r["trials"] == n) for n in ns]
                ax.plot(ns, y, "k--", marker="x", label="grid of equal cost")
                continue
            stats = [[r["hv_ratio"] for r in rows if r["trials"] == n] for n in ns]
            mean = [np.mean(v) for v in stats]
            ax.plot(ns, mean, marker=markers[i % len(markers)], label=s + (" (default)" if s == "auto" else ""),
                    lw=2.2 if s == "auto" else 1.2)
            ax.fill_between(ns, [min(v) for v in stats], [max(v) for v in stats], alpha=0.15)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks([250, 500, 1000, 2000], ["250", "500", "1,000", "2,000"])
        ax.set_xlabel("trials (designs evaluated by Optuna)")
        ax.set_ylabel("hypervolume / best known front's")
        lo = min(r["hv_ratio"] for r in st["rows"] if not r["sampler"].startswith("dense"))
        ax.set_ylim(max(0.0, min(0.9, lo - 0.01)), 1.002)
        ax.axhline(1.0, color="grey", lw=0.6)
        seeds = len({r["seed"] for r in st["rows"] if r["seed"] is not None})
        ax.set_title(f"{name}: mean of {seeds} seeds, band = min..max")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 0.1))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
