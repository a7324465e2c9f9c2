"""How close does each search get to the best known front, and how long does it take? (issues 11, 20)

Run:  python benchmarks/bench_search_quality.py [--studies NAME ...] [--seeds 0 1 2]
          [--trials 250 500 1000 2000] [--samplers auto nsga2 ...] [--quick] [--save-fronts DIR]

--quick (what benchmarks/run_all.py runs, about 3 minutes on an idle 2-core machine): sampler auto
at 1,000 trials, seeds 0-2, on every study, and the six-objective run; writes to the temp folder.
The full run (by hand, about half an hour on 2 cores): auto at 250-2,000 trials and the other samplers once at
2,000 trials, cut at each smaller budget; it writes docs/search-quality.json and
docs/img/search-quality.png.

Studies: the shipped studies/quickstart.yaml and studies/draft-chip.yaml, and three written for
issue 20 in benchmarks/studies/: wide-27-knobs (27 knobs, an optional draft chip, 2 objectives),
four-objectives (latency, cost, power and area under TTFT and throughput floors, 4.5% of the space
feasible) and moe-many-chips (DeepSeek-V3 on 8-64 chips, batch 64, 32K prompts, a tree draft, 3
objectives); two written later to check that every knob level is tried: qwen-draft-codesign
(Qwen2.5-72B, the draft a knob, an optional draft chip) and moe-ep-runtime (DeepSeek-V3 on 8-64
chips, expert parallel, runtime, link class and memory type as knobs, tokens/s per k$ maximised);
six-objectives is timed only.

- Best known front: the stored front of benchmarks/fronts/NAME.parquet (long runs, see
  benchmarks/search_quality_fronts.py), re-evaluated with today's model, united with a dense grid
  for the shipped studies (13 points per continuous knob for quickstart, 9 for draft-chip) and
  with the feasible rows of every run below.
- Hypervolume ratio: HV(run's feasible front) / HV(best known front); reference 1.1 x the best
  known front's nadir (the nadir / 1.1 for a maximised objective; every objective of these
  studies is positive).
- Runs: dse.run_study with in-memory storage; auto at each budget (its pre-search scales with the
  budget), the other samplers once at the largest budget and cut at the smaller ones (the trials
  a shorter run asks, but for the last partial batch). Time: wall and CPU seconds of the whole
  run_study call; the machine's load average is printed, since wall time on a shared machine
  says little and CPU time is what one idle core would take.

Targets (issue 20's 'Done means'): auto at 1,000 trials >= 0.999 on the shipped studies and >=
0.995 on the three new ones, every seed, each run under 30 CPU seconds; the six-objective study's
1,000 trials under 60 CPU seconds; in the full run, auto at 2,000 trials above auto at 1,000 on
wide-27-knobs for every seed. Exits 1 if one is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _targets import report  # noqa: E402
from search_quality_fronts import STUDIES, load_front  # noqa: E402

from dse.campaign.grid import distinct_points, grid_axes  # noqa: E402
from dse.results.pareto import hypervolume, pareto_mask  # noqa: E402
from dse.search.presearch import score  # noqa: E402
from dse.search.runner import run_study  # noqa: E402
from dse.study import open_study  # noqa: E402

SHIPPED = ("quickstart", "draft-chip")
NEW = ("wide-27-knobs", "four-objectives", "moe-many-chips", "qwen-draft-codesign", "moe-ep-runtime")
TARGETS = {"quickstart": 0.999, "draft-chip": 0.999, "wide-27-knobs": 0.995, "four-objectives": 0.995,
           "moe-many-chips": 0.995, "qwen-draft-codesign": 0.995, "moe-ep-runtime": 0.995}
GRID_POINTS = {"quickstart": 13, "draft-chip": 9}
RUN_CPU_S, SIX_CPU_S = 30.0, 60.0
SIX = ROOT / "benchmarks" / "studies" / "six-objectives.yaml"
ALL_SAMPLERS = ["auto", "nsga2", "nsga3", "tpe", "random", "qmc", "gp"]
#: the full run's samplers per study (TPE takes minutes a run on the new studies; give --samplers for
#: others, e.g. qmc, nsga3, gp)
FULL_SAMPLERS = {**{n: ["auto", "nsga2", "tpe", "random"] for n in SHIPPED},
                 **{n: ["auto", "nsga2", "random"] for n in NEW}}


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


def reference(front: np.ndarray, dirs) -> np.ndarray:
    """The hypervolume reference: 1.1 x the front's nadir, or the nadir / 1.1 for a maximised
    objective (every objective of these studies is positive)."""
    maxi = np.array([d == "maximize" for d in dirs])
    return np.where(maxi, front.min(axis=0) / 1.1, front.max(axis=0) * 1.1)


def run_front(study, sampler: str, seed: int, n: int, tmp: Path, save: Path | None) -> dict:
    t, c = time.perf_counter(), time.process_time()
    res = run_study(study, n_trials=n, sampler=sampler, seed=seed, storage=":memory:",
                    out=tmp / f"{study.name}-{sampler}-{seed}-{n}.parquet", progress=False)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    df = res.frame
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        df[df["feasible"]].to_parquet(save / f"{study.name}-{sampler}-{seed}-{n}.parquet")
    objs = [o.metric for o in study.objectives]
    return {"trial": df["trial"].to_numpy(), "feasible": df["feasible"].to_numpy(bool),
            "values": df[objs].to_numpy(np.float64, na_value=np.nan), "wall_s": wall, "cpu_s": cpu}


def cut(run: dict, n: int) -> tuple[np.ndarray, float]:
    """Feasible objective values among the first n trials, and the feasible fraction."""
    m = run["trial"] < n
    ok = m & run["feasible"] & np.isfinite(run["values"]).all(axis=1)
    return run["values"][ok], float(run["feasible"][m].mean())


def six_objectives(tmp: Path) -> dict:
    """The six-objective study at 1,000 trials, seed 0: times and the front's size."""
    study, _, _ = open_study(SIX)
    t, c = time.perf_counter(), time.process_time()
    df = run_study(study, n_trials=1000, seed=0, storage=":memory:", out=tmp / "six.parquet", progress=False).frame
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "trials": len(df),
            "front": int(df["is_pareto"].fillna(False).astype(bool).sum()), "feasible": int(df["feasible"].sum())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", nargs="+", default=list(SHIPPED + NEW), choices=list(STUDIES))
    ap.add_argument("--samplers", nargs="+", default=None, help="default: per study (FULL_SAMPLERS)")
    ap.add_argument("--trials", nargs="+", type=int, default=[250, 500, 1000, 2000])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--quick", action="store_true", help="auto at 1,000 trials, seeds 0 1 2, and the six objectives")
    ap.add_argument("--no-six", action="store_true", help="skip the six-objective run")
    ap.add_argument("--save-fronts", type=Path, default=None,
                    help="write each run's feasible rows here (for search_quality_fronts.py --add)")
    ap.add_argument("--out", default=None, help="JSON results (default: docs/search-quality.json; with --quick, "
                    "the temp folder)")
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
    budgets = [1000] if args.quick else sorted(args.trials)
    load = os.getloadavg()[0]
    results, checks = {"studies": {}, "load_average_at_start": load, "budgets": budgets}, []
    print(f"load average at start: {load:.1f} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name in args.studies:
            study, db, tech = open_study(STUDIES[name])
            dirs = [o.direction for o in study.objectives]
            assert all(d in ("minimize", "maximize") for d in dirs)
            samplers = ["auto"] if args.quick else (args.samplers or FULL_SAMPLERS.get(name, ["auto", "nsga2"]))
            if "gp" in samplers:
                try:
                    import torch  # noqa: F401
                except ImportError:
                    print("gp: skipped (PyTorch is not installed)")
                    samplers = [s for s in samplers if s != "gp"]
            parts, sources = [], []
            stored = load_front(name, study, db, tech)
            if stored is not None:
                parts.append(stored[1])
                sources.append(f"the stored front of benchmarks/fronts/{name}.parquet ({len(stored[1]):,} designs)")
            dense_n = None
            if name in GRID_POINTS:
                t = time.perf_counter()
                dense, dense_n = grid_front(study, db, tech, GRID_POINTS[name])
                parts.append(dense)
                sources.append(f"a dense grid of {GRID_POINTS[name]} points per knob ({dense_n:,} designs)")
                print(f"{name}: dense grid {GRID_POINTS[name]} points per knob, {dense_n:,} designs, front {len(dense)} "
                      f"({time.perf_counter() - t:.1f} s)", flush=True)
            runs: dict[tuple, dict] = {}
            for sampler in samplers:
                for seed in args.seeds:
                    for n in (budgets if sampler == "auto" else [budgets[-1]]):
                        r = runs[(sampler, seed, n)] = run_front(study, sampler, seed, n, tmp, args.save_fronts)
                        print(f"  {sampler:6s} seed {seed} {n:5d} trials: {r['wall_s']:.1f} s wall, "
                              f"{r['cpu_s']:.1f} s CPU", flush=True)
            union = np.concatenate(parts + [cut(r, n)[0] for (_, _, n), r in runs.items()])
            best = union[pareto_mask(union, dirs)]
            ref = reference(best, dirs)
            hv_best = hypervolume(best, dirs, ref)
            rows = []
            for sampler in samplers:
                for n in budgets:
                    for seed in args.seeds:
                        r = runs[(sampler, seed, n)] if sampler == "auto" else runs[(sampler, seed, budgets[-1])]
                        vals, feas = cut(r, n)
                        own = sampler == "auto" or n == budgets[-1]
                        rows.append({"sampler": sampler, "trials": n, "seed": seed,
                                     "hv_ratio": hypervolume(vals, dirs, ref) / hv_best if len(vals) else 0.0,
                                     "feasible_fraction": feas, "wall_s": r["wall_s"] if own else None,
                                     "cpu_s": r["cpu_s"] if own else None})
            for label, front in ((f"stored front ({len(stored[1]):,} designs)", stored[1]) if stored else (None, None),
                                 (f"dense grid ({dense_n:,} designs)", parts[-1]) if dense_n else (None, None)):
                if label:
                    rows.append({"sampler": label, "trials": None, "seed": None, "hv_ratio":
                                 hypervolume(front, dirs, ref) / hv_best, "feasible_fraction": None, "wall_s": None,
                                 "cpu_s": None})
            results["studies"][name] = {"reference": ref.tolist(), "hv_best": hv_best, "best_front_size": len(best),
                                        "sources": sources, "objectives": len(dirs),
                                        "knobs": len(study.searched), "rows": rows}
            print(f"\n{name}: best known front {len(best)} points, reference {np.round(ref, 3).tolist()}")
            print(f"{'sampler':<30}{'trials':>7}{'seed':>6}{'HV ratio':>10}{'feasible':>10}{'wall s':>8}{'CPU s':>8}")
            for r in rows:
                print(f"{r['sampler']:<30}{'' if r['trials'] is None else r['trials']:>7}"
                      f"{'' if r['seed'] is None else r['seed']:>6}{r['hv_ratio']:>10.4f}"
                      f"{'' if r['feasible_fraction'] is None else round(r['feasible_fraction'], 3):>10}"
                      f"{'' if r['wall_s'] is None else round(r['wall_s'], 1):>8}"
                      f"{'' if r['cpu_s'] is None else round(r['cpu_s'], 1):>8}")
            mine = [r for r in rows if r["sampler"] == "auto" and r["trials"] == 1000]
            for r in mine:
                checks.append((f"{name} auto 1000 seed {r['seed']}", f"{r['hv_ratio']:.4f}", f">= {TARGETS[name]}",
                               r["hv_ratio"] >= TARGETS[name]))
                checks.append((f"{name} auto 1000 seed {r['seed']}, CPU s", f"{r['cpu_s']:.1f}", f"< {RUN_CPU_S:g}",
                               r["cpu_s"] < RUN_CPU_S))
            if name == "wide-27-knobs" and {1000, 2000} <= set(budgets):
                for seed in args.seeds:
                    a, b = (next(r["hv_ratio"] for r in rows if r["sampler"] == "auto" and r["trials"] == n
                                 and r["seed"] == seed) for n in (1000, 2000))
                    checks.append((f"{name} auto 2000 over 1000, seed {seed}", f"{b - a:+.5f}", "> 0", b > a))
        if not args.no_six:
            six = results["six_objectives"] = six_objectives(tmp)
            print(f"\nsix-objectives, 1,000 trials: {six['wall_s']:.1f} s wall, {six['cpu_s']:.1f} s CPU, "
                  f"front {six['front']} of {six['feasible']} feasible", flush=True)
            checks.append(("six-objectives 1000 trials, CPU s", f"{six['cpu_s']:.1f}", f"< {SIX_CPU_S:g}",
                           six["cpu_s"] < SIX_CPU_S))
    results["load_average_at_end"] = os.getloadavg()[0]
    Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    plot(results, Path(args.plot))
    print(markdown(results))
    return report(checks, width=12)


def markdown(results: dict) -> str:
    """Per study: HV ratio mean (min-max over seeds) per sampler and budget, the feasible fraction
    and times at the largest budget; then every seed of every run."""
    out = []
    for name, st in results["studies"].items():
        rows = st["rows"]
        runs = [r for r in rows if r["trials"] is not None]
        budgets = sorted({r["trials"] for r in runs})
        out += [f"### {name}", "",
                f"{st['knobs']} knobs, {st['objectives']} objectives. Best known front: {st['best_front_size']:,} "
                f"points ({'; '.join(st['sources'])}; united with every run); reference point "
                f"{', '.join(f'{v:.4g}' for v in st['reference'])} (1.1 x its nadir; / 1.1 where maximised).", "",
                "| sampler | " + " | ".join(f"{n:,} trials" for n in budgets) + f" | feasible at {budgets[-1]:,} |"
                f" wall s at {budgets[-1]:,} | CPU s at {budgets[-1]:,} |",
                "| --- |" + " ---: |" * (len(budgets) + 3)]
        for s in dict.fromkeys(r["sampler"] for r in runs):
            mine = [r for r in runs if r["sampler"] == s]
            cells = []
            for n in budgets:
                v = [r["hv_ratio"] for r in mine if r["trials"] == n]
                cells.append("" if not v else f"{v[0]:.4f}" if len(v) == 1 else
                             f"{np.mean(v):.4f} ({min(v):.4f}-{max(v):.4f})")
            last = [r for r in mine if r["trials"] == budgets[-1]]
            feas = [r["feasible_fraction"] for r in last]
            wall = [r["wall_s"] for r in last if r["wall_s"] is not None]
            cpu = [r["cpu_s"] for r in last if r["cpu_s"] is not None]
            out.append(f"| {s}{' (default)' if s == 'auto' else ''} | " + " | ".join(cells) +
                       f" | {np.mean(feas):.2f} | {np.mean(wall):.1f} | {np.mean(cpu):.1f} |")
        for r in rows:
            if r["trials"] is None:
                out.append(f"| {r['sampler']} alone | " + " | ".join([f"{r['hv_ratio']:.4f}"] * len(budgets)) +
                           " | - | - | - |")
        out += ["", "Every seed, HV ratio: " + "; ".join(
            f"{s} {n:,}: " + ", ".join(f"{r['hv_ratio']:.4f}" for r in runs if r["sampler"] == s and r["trials"] == n)
            for s in dict.fromkeys(r["sampler"] for r in runs) for n in budgets
            if any(r["sampler"] == s and r["trials"] == n for r in runs)) + ".", ""]
    six = results.get("six_objectives")
    if six:
        out += ["### six-objectives (time only)", "",
                f"1,000 trials, seed 0: {six['wall_s']:.1f} s wall, {six['cpu_s']:.1f} s CPU; {six['front']} of "
                f"{six['feasible']} feasible designs on the front (in six objectives nearly every design is).", ""]
    return "\n".join(out)


def plot(results: dict, path: Path) -> None:
    """One panel per study (the shortfall 1 - HV ratio against trials, log scale, mean over seeds,
    band min..max), and one of
    the CPU time of auto's 1,000-trial runs per study against the 30 s target."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    studies = results["studies"]
    cols = 3
    panels = len(studies) + 1
    nrows = -(-panels // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.4 * cols, 4.0 * nrows), squeeze=False)
    flat = axes.ravel()
    #: one style per sampler in every panel (the legend is shared)
    style = {s: (f"C{i}", "osD^vP*X"[i]) for i, s in enumerate(ALL_SAMPLERS)}
    handles = {}
    for ax, (name, st) in zip(flat, studies.items()):
        runs = [r for r in st["rows"] if r["trials"] is not None]
        budgets = sorted({r["trials"] for r in runs})
        for s in dict.fromkeys(r["sampler"] for r in runs):
            # the shortfall 1 - HV ratio on a log axis: 0.0002 and 0.2 both readable
            stats = [[max(1.0 - r["hv_ratio"], 1e-5) for r in runs if r["sampler"] == s and r["trials"] == n]
                     for n in budgets]
            color, marker = style.get(s, ("k", "x"))
            (line,) = ax.plot(budgets, [np.mean(v) for v in stats], marker=marker, color=color,
                              lw=2.2 if s == "auto" else 1.2, label=s + (" (default)" if s == "auto" else ""))
            ax.fill_between(budgets, [min(v) for v in stats], [max(v) for v in stats], alpha=0.15, color=color)
            handles.setdefault(line.get_label(), line)
        ax.axhline(1.0 - TARGETS.get(name, 0.995), color="grey", lw=0.8, ls="--")
        if len(budgets) > 1:
            ax.set_xscale("log")
            ax.minorticks_off()
        ax.set_xticks(budgets, [f"{n:,}" for n in budgets])
        ax.set_xlabel("trials")
        ax.set_yscale("log")
        ax.set_ylim(1e-5, 1.0)
        ax.set_ylabel("1 - HV / best known front's HV")
        ax.set_title(f"{name} ({st['knobs']} knobs, {st['objectives']} obj.)", fontsize=10)
        ax.grid(alpha=0.3)
    ax = flat[len(studies)]
    names = list(studies)
    cpu = [[r["cpu_s"] for r in studies[n]["rows"] if r["sampler"] == "auto" and r["trials"] == 1000] for n in names]
    six = results.get("six_objectives")
    labels = names + (["six-objectives"] if six else [])
    means = [np.mean(c) if c else 0.0 for c in cpu] + ([six["cpu_s"]] if six else [])
    ax.barh(range(len(labels)), means, color="#56B4E9")
    ax.axvline(RUN_CPU_S, color="grey", ls="--", lw=0.8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("CPU s per 1,000-trial run of auto (30 s target; six objectives: 60 s)")
    ax.set_title("time", fontsize=10)
    for extra in flat[panels:]:
        extra.remove()
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(len(handles), 7), fontsize=9,
               frameon=False)
    fig.suptitle("What each search misses of the best known front's hypervolume (lower is better; mean of seeds, "
                 "band min..max; dashed: auto's target at 1,000 trials)", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
