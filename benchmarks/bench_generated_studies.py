"""`auto` against the exhaustive grid on studies nobody tuned it on: 10 generated studies per run.

Run:  python benchmarks/bench_generated_studies.py [--base N] [--studies 10] [--trials 1000]
          [--save-studies DIR] [--markdown FILE]

Each run draws --studies random but reasonable studies (benchmarks/study_generator.py, seeds
base, base + 1, ...; --base defaults to a new number each run, printed, so that the sampler is
never tuned to a fixed set: give it to repeat a run). For each study:

- grid: the study's exhaustive grid at its grid points (at most 64 points per continuous knob and
  3,000,000 grid points, 300,000 for MoE targets and searched trees: study_generator.GRID_MAX; a
  stepped range or a list is enumerated whole, and where every knob is, the grid holds every design
  of the space), evaluated chunk by chunk as `dse sweep` does (dse.campaign.grid.grid_chunk,
  dse.evaluation.designs.evaluate_study), feasible as in a results file (fits, buildable, every
  constraint met, finite objectives); its front;
- auto: dse.run_study with sampler auto, --trials trials (1,000), batch 64, seed 0, in memory;
- the best known front: the front of the grid's front and auto's feasible trials; reference point
  its nadir pushed out by 10% of its range in each objective (dse.results.pareto.default_reference:
  the objectives may be maximised); HV ratio = HV(front) / HV(best known front), for auto and for
  the grid alone; auto / grid = HV(auto) / HV(grid) (above 1 where auto found designs between the
  grid's points);
- levels never tried: the levels of each categorical knob (the draft, chips, memory, the draft
  chip switch, ...) that no auto trial used where the knob acts.

Prints a table per study, then the median and worst HV ratio of auto; --markdown writes both as
the section docs/search-quality.md shows. About 2 minutes for 10 studies on 2 cores (up to 5 at a
load of 4).
Exits 1 if a generated study is refused or its grid has no feasible design (the generator's promise).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _targets import report  # noqa: E402
from study_generator import generate  # noqa: E402

from dse.campaign.grid import grid_axes, grid_chunk  # noqa: E402
from dse.evaluation.designs import constraint_values, evaluate_study, metric_table, objective_matrix  # noqa: E402
from dse.results.pareto import default_reference, hypervolume, pareto_mask  # noqa: E402

CHUNK = 50_000


def grid_front(study, db, points: int) -> dict:
    """The feasible front of the study's grid at ``points`` (objective values), its designs and
    feasible designs, and the CPU seconds it took."""
    dirs = [o.direction for o in study.objectives]
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = math.prod(shape)
    front, designs, feasible = np.zeros((0, len(dirs))), 0, 0
    cpu = time.process_time()
    for start in range(0, total, CHUNK):
        flat, _idx, coded, masks = grid_chunk(study, axes, shape, start, min(total, start + CHUNK))
        if not flat.size:
            continue
        d, metrics = evaluate_study(study, coded, flat.size, db, study.tech, masks=masks)
        cols = metric_table(d, metrics)
        vals = objective_matrix(cols, study)
        ok = (constraint_values(cols, study) <= 0).all(axis=1) & cols["fits"] & np.isfinite(vals).all(axis=1)
        designs += flat.size
        feasible += int(ok.sum())
        both = np.concatenate([front, vals[ok]])
        front = both[pareto_mask(both, dirs)]
    return {"front": front, "designs": designs, "feasible": feasible, "cpu_s": time.process_time() - cpu}


def run_auto(study, trials: int, tmp: Path) -> dict:
    from dse.search.runner import run_study
    t, c = time.perf_counter(), time.process_time()
    res = run_study(study, n_trials=trials, sampler="auto", seed=0, storage=":memory:",
                    out=tmp / f"{study.name}.parquet", progress=False)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    df = res.frame
    vals = df[[o.metric for o in study.objectives]].to_numpy(np.float64, na_value=np.nan)
    ok = df["feasible"].to_numpy(bool) & np.isfinite(vals).all(axis=1)
    never = []
    for k in study.searched:
        col = f"params_{k.name}"
        if not k.choices or col not in df.columns:
            continue
        used = {str(v) for v in df[col].dropna().tolist()}
        never += [f"{k.name}={v}" for v in k.choices if str(v) not in used]
    return {"values": vals[ok], "trials": len(df), "feasible": int(ok.sum()), "wall_s": wall, "cpu_s": cpu,
            "never": never}


def one(seed: int, trials: int, db, tmp: Path, save: Path | None) -> dict:
    from dse.study import parse_study
    raw, facts = generate(seed, db)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / f"generated-{seed}.yaml").write_text(f"# {facts}\n" + yaml.safe_dump(raw, sort_keys=False))
    study = parse_study(raw, f"generated-{seed}.yaml", db)
    dirs = [o.direction for o in study.objectives]
    g = grid_front(study, db, facts["points"])
    a = run_auto(study, trials, tmp)
    union = np.concatenate([g["front"], a["values"]])
    best = union[pareto_mask(union, dirs)]
    ref = default_reference(best, dirs)
    hv_best = hypervolume(best, dirs, ref)
    hv_auto, hv_grid = hypervolume(a["values"], dirs, ref), hypervolume(g["front"], dirs, ref)
    wl = raw["workload"]
    return {"seed": seed, "target": wl["target"], "draft": wl["draft"], "knobs": facts["knobs"],
            "objectives": [f"{o['metric']}:{o['direction'][:3]}" for o in raw["objectives"]],
            "constraints": [f"{c['metric']} {'<=' if 'max' in c else '>='} {c.get('max', c.get('min')):g}"
                            for c in raw.get("constraints", [])],
            "draft_chip": "draft_chip" in raw["space"], "points": facts["points"], "exhaustive": facts["exhaustive"],
            "grid_designs": g["designs"],
            "grid_feasible": g["feasible"], "grid_front": len(g["front"]), "grid_cpu_s": g["cpu_s"],
            "auto_trials": a["trials"], "auto_feasible": a["feasible"], "auto_cpu_s": a["cpu_s"],
            "auto_wall_s": a["wall_s"], "hv_auto": hv_auto / hv_best if hv_best > 0 else float("nan"),
            "hv_grid": hv_grid / hv_best if hv_best > 0 else float("nan"),
            "auto_over_grid": hv_auto / hv_grid if hv_grid > 0 else float("inf"), "never": a["never"]}


def markdown(rows: list[dict], base: int, trials: int, load: tuple[float, float]) -> str:
    hv = np.array([r["hv_auto"] for r in rows])
    worst = rows[int(np.argmin(hv))]
    out = [f"Seeds {base}-{base + len(rows) - 1}, auto at {trials:,} trials (seed 0), load average "
           f"{load[0]:.1f} at the start and {load[1]:.1f} at the end. **Median HV ratio of auto "
           f"{np.median(hv):.4f}, worst {hv.min():.4f}** (seed {worst['seed']}); the grid alone: median "
           f"{np.median([r['hv_grid'] for r in rows]):.4f}, worst {min(r['hv_grid'] for r in rows):.4f}.", "",
           "| seed | target | draft | knobs | objectives | constraints | grid: points, designs (feasible) | auto "
           "trials (feasible) | auto HV | grid HV | auto / grid | CPU s auto / grid | levels auto never tried |",
           "| ---: | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        draft = r["draft"] if isinstance(r["draft"], str) else "[" + ", ".join(map(str, r["draft"])) + "]"
        out.append(f"| {r['seed']} | {r['target']} | {draft}{' + draft chip' if r['draft_chip'] else ''} | "
                   f"{r['knobs']} | {', '.join(r['objectives'])} | {', '.join(r['constraints']) or '-'} | "
                   f"{'all' if r['exhaustive'] else r['points']}, {r['grid_designs']:,} ({r['grid_feasible']:,}) | "
                   f"{r['auto_trials']:,} ({r['auto_feasible']:,}) | "
                   f"{r['hv_auto']:.4f} | {r['hv_grid']:.4f} | {r['auto_over_grid']:.3f} | "
                   f"{r['auto_cpu_s']:.1f} / {r['grid_cpu_s']:.1f} | {', '.join(r['never']) or '-'} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=int, default=None, help="first seed (default: a new one each run, printed)")
    ap.add_argument("--studies", type=int, default=10)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--save-studies", type=Path, default=None, help="write each generated study's YAML here")
    ap.add_argument("--markdown", type=Path, default=None, help="write the report's markdown here")
    args = ap.parse_args(argv)
    from dse.catalog.database import load_database
    base = args.base if args.base is not None else int(time.time()) % 100_000
    load0 = os.getloadavg()[0]
    print(f"seeds {base}-{base + args.studies - 1}, auto at {args.trials} trials; load average {load0:.1f} "
          f"on {os.cpu_count()} cores", flush=True)
    db = load_database()
    rows, checks = [], []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(base, base + args.studies):
            try:
                r = one(seed, args.trials, db, Path(tmp), args.save_studies)
            except Exception as e:      # a study the generator promised valid: say which, go on
                print(f"seed {seed}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                checks.append((f"seed {seed}: a valid study", type(e).__name__, "runs", False))
                continue
            rows.append(r)
            print(f"seed {seed}: {r['target']}, {r['knobs']} knobs, {len(r['objectives'])} obj, "
                  f"{len(r['constraints'])} cons; grid {r['grid_designs']:,} designs ({r['grid_feasible']:,} "
                  f"feasible, {r['grid_cpu_s']:.1f} CPU s); auto {r['auto_feasible']:,}/{r['auto_trials']:,} "
                  f"feasible ({r['auto_cpu_s']:.1f} CPU s); HV auto {r['hv_auto']:.4f}, grid {r['hv_grid']:.4f}; "
                  f"never tried: {', '.join(r['never']) or '-'}", flush=True)
            checks.append((f"seed {seed}: grid has feasible designs", f"{r['grid_feasible']:,}", "> 0",
                           r["grid_feasible"] > 0))
    load1 = os.getloadavg()[0]
    print(f"\n{len(rows)} studies in {time.perf_counter() - t0:.0f} s\n")
    if rows:
        text = markdown(rows, base, args.trials, (load0, load1))
        print(text)
        if args.markdown:
            args.markdown.write_text(text + "\n")
    return report(checks, width=12)


if __name__ == "__main__":
    sys.exit(main())
