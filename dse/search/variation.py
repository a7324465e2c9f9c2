"""How sampler auto makes new designs (dse.search.presearch, dse.search.breeder): uniform draws,
children of parents (uniform crossover, then a normal step per moved knob), and probes around the
front's ends (:func:`probes`: one knob at a time, a compass search)."""

from __future__ import annotations

import numpy as np

from ..study.spec import Knob, StudySpec


def sample_knob(k: Knob, n: int, rng: np.random.Generator) -> np.ndarray:
    """n values of one searched knob: uniform (log-uniform for log ranges) or a uniform choice."""
    if k.choices:
        return np.array(k.choices, dtype=object)[rng.integers(0, len(k.choices), n)]
    lo, hi = float(k.low), float(k.high)
    if k.log:
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    else:
        x = rng.uniform(lo, hi, n)
    return snap(k, x)


def sample(study: StudySpec, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """n designs drawn uniformly (:func:`sample_knob` per searched knob)."""
    return {k.name: sample_knob(k, n, rng) for k in study.searched}


def snap(k: Knob, x: np.ndarray) -> np.ndarray:
    """Clip to the range and round to the knob's step (integers for int knobs)."""
    lo, hi = float(k.low), float(k.high)
    x = np.clip(x, lo, hi)
    if k.step:              # the top of the step grid (Optuna's too: high need not be on it)
        top = lo + np.floor((hi - lo) / k.step + 1e-9) * k.step
        x = np.clip(lo + np.round((x - lo) / k.step) * k.step, lo, top)
    if k.kind == "int":
        return np.round(x).astype(np.int64)
    return x.astype(np.float64)


def mutate(study: StudySpec, params: dict[str, np.ndarray], scale, rng: np.random.Generator
           ) -> dict[str, np.ndarray]:
    """Children: each knob moved with probability 2/knobs (at least one knob per child) by a
    normal step of ``scale`` (one number, or one per child) x its range (in log space for log
    ranges); categoricals redrawn."""
    knobs = study.searched
    n = len(next(iter(params.values())))
    move = rng.random((n, len(knobs))) < min(1.0, 2.0 / len(knobs))
    move[np.arange(n), rng.integers(0, len(knobs), n)] = True
    out = {}
    for j, k in enumerate(knobs):
        v = params[k.name]
        if k.choices:
            new = sample_knob(k, n, rng)
        else:
            x = np.asarray(v, dtype=np.float64)
            if k.log:
                new = np.exp(np.log(x) + rng.normal(0.0, 1.0, n) * scale * np.log(k.high / k.low))
            else:
                step = rng.normal(0.0, 1.0, n) * scale * float(k.high - k.low)
                if k.kind == "int":             # an integer knob moves by at least one
                    step = np.where(np.abs(step) < 1, np.sign(step + 1e-12), step)
                new = x + step
            new = snap(k, new)
        out[k.name] = np.where(move[:, j], new, v).astype(new.dtype if not k.choices else object)
    return out


def crossover(study: StudySpec, a: dict[str, np.ndarray], b: dict[str, np.ndarray], rng: np.random.Generator,
              share: float = 1.0) -> dict[str, np.ndarray]:
    """Uniform crossover: a ``share`` of the children (each with that probability) take each
    knob from parent a or b with probability 1/2; the others are copies of a."""
    n = len(next(iter(a.values())))
    cross = rng.random(n) < share
    out = {}
    for k in study.searched:
        out[k.name] = np.where(cross & (rng.random(n) < 0.5), b[k.name], a[k.name])
    return out


def breed(study: StudySpec, pools: list[dict[str, np.ndarray]] | dict[str, np.ndarray], counts, scale,
          rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Children of pools of parents: ``counts[i]`` from pool i (two parents drawn uniformly from
    it), half of them a crossover of their two parents (:func:`crossover`), every one mutated
    (:func:`mutate` at ``scale``, a number or one per child). One pool and one count may be given
    bare."""
    if isinstance(pools, dict):
        pools, counts = [pools], [counts]
    a_parts, b_parts = [], []
    for pool, cnt in zip(pools, counts):
        size = len(next(iter(pool.values())))
        i, j = rng.integers(0, size, cnt), rng.integers(0, size, cnt)
        a_parts.append({k: v[i] for k, v in pool.items()})
        b_parts.append({k: v[j] for k, v in pool.items()})
    a = {k: np.concatenate([p[k] for p in a_parts]) for k in a_parts[0]}
    b = {k: np.concatenate([p[k] for p in b_parts]) for k in b_parts[0]}
    return mutate(study, crossover(study, a, b, rng, share=0.5), scale, rng)


def step_scale(progress: float) -> float:
    """Mutation step as a fraction of a knob's range: 20% at the start of refinement, 2% at its
    end (geometric in between)."""
    return 0.2 * 0.1 ** min(max(progress, 0.0), 1.0)


#: steps of a probe, fractions of a knob's range (of its log range for a log knob), up and down
PROBE_STEPS = (0.1, 0.03, 0.01, 0.003)


def probes(study: StudySpec, row: dict[str, np.ndarray], active: dict[str, bool] | None = None,
           steps=PROBE_STEPS) -> dict[str, np.ndarray]:
    """Designs one knob away from ``row`` (knob arrays of one design): each range knob moved up and
    down by each of ``steps`` and set to either end, each choice knob set to each other choice;
    knobs ``active`` marks False are left alone (moving them changes nothing). A compass search
    around the design (Kolda, Lewis and Torczon 2003, SIAM Review 45(3)): an objective's best
    design whose best move is along one knob, or to its bound (a knob whose best value is its
    end, such as no SRAM), gets there in a few rounds, where random children rarely do."""
    cols = {k: np.asarray(v)[:1] for k, v in row.items()}
    moves = []                                  # (knob name, new values)
    for k in study.searched:
        if active is not None and not active.get(k.name, True):
            continue
        x = cols[k.name][0]
        if k.choices:
            new = np.array([c for c in k.choices if not (c == x and type(c) is type(x))], dtype=object)
        else:
            lo, hi = float(k.low), float(k.high)
            s = np.array([d * s for s in steps for d in (1.0, -1.0)])
            if k.log:
                vals = np.exp(np.log(float(x)) + s * np.log(hi / lo))
            else:
                vals = float(x) + s * (hi - lo)
                if k.kind == "int":
                    vals = np.where(np.abs(vals - float(x)) < 1, float(x) + np.sign(s), vals)
            new = snap(k, np.concatenate([vals, [lo, hi]]))
            new = np.unique(new[new != x])
        if new.size:
            moves.append((k.name, new))
    n = sum(v.size for _, v in moves)
    out = {k: np.repeat(v, n) for k, v in cols.items()}
    at = 0
    for name, new in moves:
        out[name] = out[name].astype(object) if new.dtype == object else out[name]
        out[name][at:at + new.size] = new
        at += new.size
    return out
