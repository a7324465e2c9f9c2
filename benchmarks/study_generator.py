"""Random but reasonable studies, one per seed, for benchmarks the sampler was never tuned on.

Run:  python benchmarks/study_generator.py [--seeds 0 1 2] [--out DIR]     # print (or write) the YAML

A study is drawn from a seeded generator (numpy's default_rng(seed)), then checked by today's
validation (dse.study.parse_study); a draw it refuses is redrawn from the same generator, so a
seed always gives the same study. What is drawn:

- the target: dense (Llama-3.1-8B/70B, Llama-3.3-70B, Qwen2.5-32B/72B, Qwen3-32B, Gemma-2-27B) or
  MoE (Mixtral-8x7B, Qwen3-235B-A22B, DeepSeek-V3), dtype fp8 or bf16, batch, prompt and output
  lengths (each fixed or a short list);
- the draft: one (a model of the target's tokenizer, EAGLE-3/EAGLE, Medusa-4, n-gram; with a
  given alpha or the published table's), or several as a knob (with "none"); sometimes a tree
  size, k or expert parallel (MoE) searched; sometimes an optional draft chip;
- the space: a random subset of the target chip's knobs searched (the others fixed at a
  reasonable value), chip counts that split the heads of the target and of every draft model
  (and enough chips of 192 GB for the weights); ranges geometric or stepped;
- 2 to 4 objectives: a speed (latency or tokens/s) and 1-3 of cost, power, energy, die area,
  TTFT, tokens/s per k$, tokens/s per W;
- 0 to 2 constraints (power, TTFT, throughput, cost or latency), each threshold at a random
  quantile (30-90%) of the metric over the designs that fit among up to 3,000 points of the
  study's grid, so that the grid always holds feasible designs;
- the grid's resolution: the largest number of points per continuous knob (2-MAX_POINTS) whose
  grid has at most GRID_MAX points (GRID_MAX_SLOW for MoE targets and searched trees, the slower
  models); knobs are fixed one by one (at random, at the middle of a range) until 2 points fit.
  Half the ranges are stepped (at most 8 values), so some grids hold every design of the space
  (``exhaustive`` in the facts).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dse.campaign.grid import distinct_points, grid_axes  # noqa: E402
from dse.errors import SpecError  # noqa: E402
from dse.evaluation.designs import constraint_values, evaluate_study, metric_table  # noqa: E402
from dse.workload.spec import shards_attention  # noqa: E402

#: grid points of a generated study's grid (the slow models: MoE targets, searched trees)
GRID_MAX, GRID_MAX_SLOW = 3_000_000, 300_000
#: points per continuous knob at most
MAX_POINTS = 64
#: grid points evaluated to place the constraint thresholds
PILOT = 3_000
#: target -> draft models of its tokenizer (all in hardware_db/models)
TARGETS = {
    "llama-3.1-8b": ["llama-3.2-1b", "llama-3.2-3b"],
    "llama-3.1-70b": ["llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"],
    "llama-3.3-70b": ["llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"],
    "qwen2.5-32b": ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"],
    "qwen2.5-72b": ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b"],
    "qwen3-32b": ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"],
    "gemma-2-27b": ["gemma-2-2b", "gemma-2-9b"],
    "mixtral-8x7b": ["mistral-7b"],
    "qwen3-235b-a22b": ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"],
    "deepseek-v3": [],
}
MOE = ("mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3")
#: drafters that need no draft model
METHODS = ["eagle3", "ngram", "medusa:4"]
SPEEDS = [("spec_ms_per_token", "minimize"), ("tokens_per_s", "maximize")]
OTHERS = [("cost_usd", "minimize"), ("power_w", "minimize"), ("energy_j_per_token", "minimize"),
          ("total_die_area_mm2", "minimize"), ("ttft_ms", "minimize"), ("tokens_per_s_per_kusd", "maximize"),
          ("tokens_per_s_per_w", "maximize")]
#: metric -> bound kind of a constraint
CONSTRAINTS = {"power_w": "max", "ttft_ms": "max", "tokens_per_s": "min", "cost_usd": "max",
               "spec_ms_per_token": "max"}


def _pick(rng, items, k):
    """k distinct items of ``items`` in their order."""
    idx = sorted(rng.choice(len(items), size=min(k, len(items)), replace=False).tolist())
    return [items[i] for i in idx]


def _chips(rng, db, target: str, drafts: list[str], dtype: str) -> list[int]:
    """2-4 chip counts that split the heads of the target and of every draft model, at least
    enough chips of 192 GB for the weights (a smaller group cannot hold them on any memory)."""
    models = [db.model(target)] + [db.model(d) for d in drafts]
    t = models[0]
    weights_gb = (t.params_b or 10e9) / 1e9 * (1.0 if dtype == "fp8" else 2.0)     # params_b is stored in SI (parameters)
    low = max(1, 2 ** math.ceil(math.log2(max(1.0, weights_gb / 192.0))))
    ok = [c for c in (1, 2, 4, 8, 16, 32, 64) if c >= low and all(shards_attention(m, c) for m in models)]
    if not ok:
        return []
    return _pick(rng, ok, int(rng.integers(2, 5))) if len(ok) > 1 else ok


def _range(rng, lows, highs, steps, log: bool = True):
    """A range knob: continuous (geometric when ``log``) or, half the time, stepped (a finite set
    of at most 8 values, which a grid of 8 or more points enumerates whole)."""
    lo, hi = rng.choice(lows).item(), rng.choice(highs).item()
    if rng.random() < 0.5:
        step = next((st for st in steps if round((hi - lo) / st, 9) <= 7 and round((hi - lo) / st, 9).is_integer()),
                    None)
        if step is not None:
            return {"low": lo, "high": hi, "step": step}
    return {"low": lo, "high": hi, **({"log": True} if log and lo > 0 else {})}


def _target_chip(rng, chips: list[int], moe: bool) -> dict:
    """The target chip: each knob searched with some probability, else fixed at a reasonable value."""
    def maybe(p, searched, fixed):
        return searched() if rng.random() < p else fixed
    mems = ["hbm3", "hbm3e", "hbm4"] + ([] if moe else ["gddr7", "lpddr5x"])
    out = {
        "process_node": maybe(0.5, lambda: _pick(rng, ["n7", "n5", "n4", "n3"], int(rng.integers(2, 5))),
                              str(rng.choice(["n5", "n4", "n3"]))),
        "peak_tflops": maybe(0.85, lambda: _range(rng, [200, 400], [1600, 2400, 4800], [200, 300, 400, 550, 600, 700, 800]),
                             int(rng.choice([1000, 2000]))),
        "memory": maybe(0.6, lambda: _pick(rng, mems, int(rng.integers(2, 4))), "hbm3e"),
        "memory_stacks": maybe(0.6, lambda: {"low": int(rng.choice([1, 2])), "high": int(rng.choice([8, 12]))},
                               int(rng.choice([6, 8]))),
        "stack_height": maybe(0.4, lambda: _pick(rng, [8, 12, 16], int(rng.integers(2, 4))), 12),
        "sram_mb": maybe(0.4, lambda: _range(rng, [0], [256, 512, 1024], [64, 128, 256], log=False),
                         int(rng.choice([0, 64]))),
        "chips": chips if len(chips) > 1 and rng.random() < 0.8 else chips[-1],
        "link_bw_gb_s": maybe(0.5, lambda: _range(rng, [100, 200], [900, 1800, 3600], [100, 200, 250, 400, 500, 700, 800]),
                              900),
    }
    if rng.random() < 0.25:
        out["link_class"] = _pick(rng, ["nvlink", "pcie", "ethernet"], 2)
    if rng.random() < 0.25:
        out["runtime"] = _pick(rng, ["graphs", "eager", "dataflow", "gpt-fast"], int(rng.integers(2, 4)))
    if rng.random() < 0.15:
        out["compute_efficiency"] = _range(rng, [0.4], [0.8], [0.1], log=False)
    return out


def _draft_chip(rng) -> dict:
    def maybe(p, searched, fixed):
        return searched() if rng.random() < p else fixed
    return {
        "enabled": [True, False],
        "process_node": maybe(0.3, lambda: ["n7", "n5"], "n5"),
        "peak_tflops": maybe(0.8, lambda: _range(rng, [10, 25], [200, 400], [25, 35, 50, 75]), 100),
        "memory": maybe(0.6, lambda: _pick(rng, ["lpddr5x", "gddr7", "hbm3e", "sram"], int(rng.integers(2, 4))),
                        "lpddr5x"),
        "memory_stacks": maybe(0.4, lambda: {"low": 1, "high": 4}, 2),
        "sram_mb": maybe(0.3, lambda: _range(rng, [0], [1024], [128, 256], log=False), 0),
        "link_bw_gb_s": maybe(0.5, lambda: _range(rng, [16], [900], [136], log=True), 128),
    }


def draw(rng, db) -> dict:
    """One candidate study (a mapping as in a study file), before validation and grid sizing."""
    target = str(rng.choice(list(TARGETS)))
    moe = target in MOE
    models = TARGETS[target]
    dtype = "fp8" if rng.random() < 0.7 else "bf16"
    methods = ["eagle", "ngram"] if target == "deepseek-v3" else METHODS
    wl = {"target": target, "dtype": dtype, "kv_dtype": dtype,
          "batch": _pick(rng, [1, 4, 8, 16, 32, 64], 2) if rng.random() < 0.3 else int(rng.choice([1, 4, 8, 16, 32, 64])),
          "prompt_tokens": int(rng.choice([512, 1024, 2048, 4096, 8192])),
          "output_tokens": _pick(rng, [128, 256, 512, 1024], 2) if rng.random() < 0.2 else
          int(rng.choice([128, 256, 512, 1024]))}
    if rng.random() < 0.5:          # the draft a knob
        pool = models + methods
        drafts = ["none"] + _pick(rng, pool, int(rng.integers(1, min(4, len(pool)) + 1)))
        wl["draft"] = drafts
        wl["task"] = str(rng.choice(["mix", "chat", "math", "qa"]))
    else:
        d = str(rng.choice(models + methods))
        drafts = [d]
        wl["draft"] = d
        if rng.random() < 0.6:
            wl["acceptance"] = {"alpha": round(float(rng.uniform(0.6, 0.9)), 2)}
        else:
            wl["task"] = str(rng.choice(["mix", "chat", "math", "qa"]))
    draft_models = [d for d in drafts if d in models]
    r = rng.random()
    if r < 0.25:
        wl["tree_nodes"] = _pick(rng, [0, 8, 16, 32, 64], int(rng.integers(2, 4)))
    wl["k"] = "auto"
    chips = _chips(rng, db, target, draft_models, dtype)
    if not chips:
        return {}
    if moe and rng.random() < 0.6:
        n_exp = db.model(target).num_experts
        g = n_exp
        for c in chips:
            g = math.gcd(g, c)
        eps = [e for e in (1, 2, 4, 8, 16) if g % e == 0]
        if len(eps) > 1:
            wl["ep"] = _pick(rng, eps, min(len(eps), int(rng.integers(2, 4))))
    space = {"target_chip": _target_chip(rng, chips, moe)}
    if draft_models and rng.random() < 0.5:
        space["draft_chip"] = _draft_chip(rng)
    if rng.random() < 0.2 and "tree_nodes" not in wl:
        wl.pop("k")
        space["k"] = {"low": 1, "high": 8}
    speed = SPEEDS[int(rng.random() < 0.35)]
    n_obj = int(rng.choice([2, 3, 4], p=[0.4, 0.4, 0.2]))
    objs = [speed] + _pick(rng, OTHERS, n_obj - 1)
    n_con = int(rng.choice([0, 1, 2], p=[0.4, 0.4, 0.2]))
    cons = _pick(rng, [m for m in CONSTRAINTS if m not in {o for o, _ in objs}], n_con)
    return {"name": "", "description": "", "workload": wl, "space": space,
            "objectives": [{"metric": m, "direction": d} for m, d in objs],
            "_constraints": cons, "_quantiles": [round(float(rng.uniform(0.3, 0.9)), 2) for _ in cons],
            "search": {"sampler": "auto", "n_trials": 500, "batch_size": 64, "seed": 0}, "storage": ":memory:"}


def grid_points(study) -> tuple[int, int]:
    """(points per continuous knob, grid points): the largest points in 2..MAX_POINTS within the grid cap, (0, size
    at 2) if none."""
    cap = GRID_MAX_SLOW if is_slow(study) else GRID_MAX
    total = 0
    for p in range(MAX_POINTS, 1, -1):
        total = math.prod(v.size for _, v in grid_axes(study, p))
        if total <= cap:
            return p, total
    return 0, total


def exhaustive(study, points: int) -> bool:
    """Does the grid at ``points`` hold every design of the space (every searched knob a list, an
    integer range or a stepped range of at most ``points`` values)?"""
    for k in study.searched:
        if k.choices:
            continue
        if k.kind != "int" and not k.step:
            return False
        if round((k.high - k.low) / (k.step or 1)) + 1 > points:
            return False
    return True


def is_slow(study) -> bool:
    """MoE targets and searched trees evaluate at thousands of designs per second, not hundreds of thousands."""
    wl = study.raw["workload"]
    return wl["target"] in MOE or isinstance(wl.get("tree_nodes"), list)


def _fix_one(rng, raw: dict, study) -> bool:
    """Fix one searched knob of the space (not the chips, the draft or the draft chip switch) at its
    first value; False when none is left."""
    cands = []
    for section in ("target_chip", "draft_chip"):
        for key, val in raw["space"].get(section, {}).items():
            if isinstance(val, (list, dict)) and key not in ("chips", "enabled"):
                cands.append((section, key))
    if not cands:
        return False
    section, key = cands[int(rng.integers(len(cands)))]
    val = raw["space"][section][key]
    if isinstance(val, list):
        raw["space"][section][key] = val[0]
    else:           # the middle of the range (geometric for a log range), an integer for an integer range
        lo, hi = val["low"], val["high"]
        mid = math.sqrt(lo * hi) if val.get("log") else (lo + hi) / 2
        raw["space"][section][key] = round(mid) if isinstance(lo, int) and isinstance(hi, int) else mid
    return True


def pilot(study, db, points: int, n: int = PILOT) -> dict[str, np.ndarray]:
    """Metric columns of up to n points of the grid (evenly spaced flat indices): the designs that fit."""
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = math.prod(shape)
    flat = np.unique(np.linspace(0, total - 1, min(n, total)).astype(np.int64))
    idx = np.unravel_index(flat, shape)
    params = {k.name: v[i] for (k, v), i in zip(axes, idx)}
    keep = distinct_points(study, axes, idx, params, flat.size)
    params = {k: v[keep] for k, v in params.items()}
    designs, metrics = evaluate_study(study, params, int(keep.sum()), db, study.tech)
    cols = metric_table(designs, metrics)
    cons = constraint_values(cols, study)
    fit = (cons <= 0).all(axis=1) & cols["fits"]
    return {m: np.asarray(cols[m], dtype=np.float64)[fit] for m in set(CONSTRAINTS) | {o.metric for o in study.objectives}}


def generate(seed: int, db=None, tries: int = 200) -> tuple[dict, dict]:
    """(study mapping, facts: draws refused, grid points per knob and grid size) of seed ``seed``."""
    from dse.catalog.database import load_database
    from dse.study import parse_study
    db = db or load_database()
    rng = np.random.default_rng(seed)
    refused = 0
    for _ in range(tries):
        raw = draw(rng, db)
        if not raw:
            refused += 1
            continue
        cons, qs = raw.pop("_constraints"), raw.pop("_quantiles")
        raw["name"] = f"generated-{seed}"
        try:
            study = parse_study(raw, f"generated-{seed}.yaml", db)
            points, total = grid_points(study)
            while not points:
                if not _fix_one(rng, raw, study):
                    break
                study = parse_study(raw, f"generated-{seed}.yaml", db)
                points, total = grid_points(study)
        except SpecError:
            refused += 1
            continue
        if not points or sum(k.searched for k in study.knobs) < 2:
            refused += 1
            continue
        cols = pilot(study, db, points)
        ok = np.ones(len(next(iter(cols.values()))), dtype=bool)
        for m in {o.metric for o in study.objectives}:
            ok &= np.isfinite(cols[m])
        if ok.sum() < 20:               # too few designs fit: draw again
            refused += 1
            continue
        raw["constraints"] = []
        for m, q in zip(cons, qs):
            v = cols[m][ok & np.isfinite(cols[m])]
            kind = CONSTRAINTS[m]
            bound = float(np.quantile(v, q if kind == "max" else 1.0 - q))
            raw["constraints"].append({"metric": m, kind: float(f"{bound:.3g}")})
        if not raw["constraints"]:
            raw.pop("constraints")
        raw["grid"] = {"points": points}
        raw["description"] = (f"generated study, seed {seed}: {raw['workload']['target']}, "
                              f"{len(raw['objectives'])} objectives, {len(cons)} constraints")
        study = parse_study(raw, f"generated-{seed}.yaml", db)
        return raw, {"refused": refused, "points": points, "grid": total, "exhaustive": exhaustive(study, points),
                     "knobs": sum(k.searched for k in study.knobs), "slow": is_slow(study)}
    raise SpecError(None, "seed", seed, f"no valid study in {tries} draws")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--out", type=Path, default=None, help="write generated-SEED.yaml here instead of printing")
    args = ap.parse_args(argv)
    for s in args.seeds:
        raw, facts = generate(s)
        text = f"# {facts}\n" + yaml.safe_dump(raw, sort_keys=False)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"generated-{s}.yaml").write_text(text)
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
