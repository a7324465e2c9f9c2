"""Measured rank profiles of tree drafting (hardware_db/acceptance/rank_profiles.yaml).

A profile gives p_r, the probability that the rank-r candidate of an accepted node is the one
the target accepts (Sequoia, Chen et al. 2024, arXiv 2402.12374, section 3), measured for one
drafter kind at its own top-1 rate a0. Scaled to a top-1 rate a (MODEL.md section 3):

    p_1 = a,   p_r(a) = p_r(a0) * (a/a0)^beta * (1 - a)/(1 - a0)   (r >= 2),

the tail cut to 1 - a should it exceed it; ranks past the profile's last have p = 0. beta is
fitted on Medusa's per-head top-k accuracies (the YAML says how). ``geometric`` is the
optimistic limit p_r = a(1-a)^(r-1).

>>> import numpy as np
>>> p = GEOMETRIC.probabilities(np.array([0.5]), 3)
>>> [round(float(x), 3) for x in p[0]]
[0.5, 0.25, 0.125]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import MISSING, SpecError, raise_collected
from .fields import Range

#: the file, under a database root
RANK_PROFILES_FILE = Path("acceptance") / "rank_profiles.yaml"
#: the optimistic limit's name (not in the file: it has no numbers)
GEOMETRIC_NAME = "geometric"


@dataclass(frozen=True, slots=True)
class RankProfile:
    """One drafter kind's measured rank probabilities ``p`` (rank 1 first) at top-1 rate p[0].

    ``geometric`` (no numbers) is p_r = a(1-a)^(r-1). ``estimate`` marks a profile taken from
    another kind, with the reason in ``source``."""

    name: str
    p: tuple[float, ...] = ()
    beta: float = 0.5
    source: str = ""
    estimate: bool = False

    @property
    def geometric(self) -> bool:
        return not self.p

    def probabilities(self, top1, ranks: int) -> np.ndarray:
        """p[..., r-1] for ranks 1..``ranks`` at top-1 rates ``top1`` (any shape): the scaling
        law of the module docstring (geometric: a(1-a)^(r-1))."""
        a = np.asarray(top1, dtype=np.float64)[..., None]
        r = np.arange(ranks, dtype=np.float64)
        if self.geometric:
            return a * (1.0 - a) ** r
        a0 = self.p[0]
        tail = np.zeros(ranks)
        m = min(len(self.p), ranks)
        tail[1:m] = self.p[1:m]
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.sqrt(a / a0) if self.beta == 0.5 else (a / a0) ** self.beta
            out = tail * (scale * (1.0 - a) / (1.0 - a0))
            room = np.where(out.sum(axis=-1, keepdims=True) > 1.0 - a,
                            (1.0 - a) / out.sum(axis=-1, keepdims=True), 1.0)
        out = np.where(np.isfinite(room), out * room, 0.0)
        out[..., 0] = a[..., 0]
        return out


GEOMETRIC = RankProfile(name=GEOMETRIC_NAME, source="p_r = alpha(1-alpha)^(r-1), Sequoia section 3.1: the "
                        "optimistic limit (every candidate independently as good as the first)")


@dataclass(frozen=True, slots=True)
class RankProfiles:
    """Every profile by name (``geometric`` included) and the profile each drafter kind uses."""

    profiles: dict[str, RankProfile]
    drafters: dict[str, str]

    def for_drafter(self, kind: str) -> RankProfile:
        """The profile a tree of this drafter kind uses from alpha alone (geometric if none)."""
        return self.profiles.get(self.drafters.get(kind, GEOMETRIC_NAME), GEOMETRIC)

    def get(self, name: str, where: str = "rank_profile", path: str | None = None) -> RankProfile:
        """A profile by name; SpecError listing the names otherwise."""
        if name not in self.profiles:
            raise SpecError(path, where, name, f"expected one of {', '.join(sorted(self.profiles))}")
        return self.profiles[name]


def load_rank_profiles(root: str | Path) -> RankProfiles:
    """``root/acceptance/rank_profiles.yaml`` -> RankProfiles (cached per file)."""
    return _for_root(str(root))


@lru_cache(maxsize=8)
def _for_root(root: str) -> RankProfiles:
    return _load(str(Path(root) / RANK_PROFILES_FILE))


def rank_profile(kind: str, top1, ranks: int, root: str | Path | None = None) -> np.ndarray:
    """p[..., r-1], r = 1..``ranks``: drafter ``kind``'s measured profile (``model``, ``eagle``,
    ``medusa``, ``ngram``, ``early-exit``) scaled to ``top1`` (database at ``root``, default the
    shipped one)."""
    if root is None:
        from .database import default_root
        root = default_root()
    return load_rank_profiles(root).for_drafter(kind).probabilities(top1, ranks)


def _numbers(path: str, where: str, raw, rng: Range, errors: list[SpecError]) -> tuple[float, ...]:
    if not isinstance(raw, list) or not raw:
        errors.append(SpecError(path, where, raw if raw is not None else MISSING, "expected a non-empty list of numbers"))
        return ()
    try:
        return tuple(float(rng.check(x, path, where)) for x in raw)
    except SpecError as exc:
        errors.append(exc)
        return ()


def _profile_p(path: str, name: str, entry: dict, errors: list[SpecError]) -> tuple[float, ...]:
    """Rank probabilities from one of: ``counts`` + ``of``, ``top_k_accuracy`` (cumulative) or ``p``."""
    where = f"profiles.{name}"
    unit = Range(lo=0.0, hi=1.0)
    if "counts" in entry:
        counts = _numbers(path, f"{where}.counts", entry["counts"], Range(integer=True, lo=0), errors)
        try:
            total = Range(integer=True, lo=1).check(entry.get("of"), path, f"{where}.of")
        except SpecError as exc:
            errors.append(exc)
            return ()
        if sum(counts) > total:
            errors.append(SpecError(path, f"{where}.of", total, f"expected >= the sum of the counts ({sum(counts):g})"))
            return ()
        return tuple(c / total for c in counts)
    if "top_k_accuracy" in entry:
        cum = _numbers(path, f"{where}.top_k_accuracy", entry["top_k_accuracy"], unit, errors)
        if any(b < a for a, b in zip(cum, cum[1:])):
            errors.append(SpecError(path, f"{where}.top_k_accuracy", list(cum), "expected a non-decreasing list"))
            return ()
        return tuple(b - a for a, b in zip((0.0, *cum), cum))
    p = _numbers(path, f"{where}.p", entry.get("p"), unit, errors)
    if p and sum(p) > 1.0 + 1e-9:
        errors.append(SpecError(path, f"{where}.p", list(p), "expected probabilities summing to <= 1"))
        return ()
    return p


@lru_cache(maxsize=8)
def _load(path: str) -> RankProfiles:
    from .yamlio import load_yaml  # yaml only when a database is read (dse.model imports workload)
    raw = load_yaml(Path(path), kind="rank profiles")
    errors: list[SpecError] = []
    beta_item = (raw.get("scaling") or {}).get("beta") if isinstance(raw.get("scaling"), dict) else None
    beta = 0.5
    if not isinstance(beta_item, dict) or "value" not in beta_item or not beta_item.get("source"):
        errors.append(SpecError(path, "scaling.beta", beta_item if beta_item is not None else MISSING,
                                "expected {value, source}"))
    else:
        try:
            beta = float(Range(lo=0.0, hi=4.0).check(beta_item["value"], path, "scaling.beta"))
        except SpecError as exc:
            errors.append(exc)
    block = raw.get("profiles")
    if not isinstance(block, dict) or not block:
        raise SpecError(path, "profiles", block if block is not None else MISSING, "expected a mapping of profiles")
    profiles: dict[str, RankProfile] = {GEOMETRIC_NAME: GEOMETRIC}
    pending = {}
    for name, entry in block.items():
        where = f"profiles.{name}"
        if name == GEOMETRIC_NAME or not isinstance(entry, dict):
            errors.append(SpecError(path, where, name, "expected a mapping (and not the reserved name 'geometric')"))
            continue
        estimate = entry.get("estimate") is True
        source = str(entry.get("reason") if estimate else entry.get("source") or "")
        if not source:
            errors.append(SpecError(path, where, name, "needs a source, or estimate: true and a reason"))
            continue
        if "same_as" in entry:
            pending[name] = (str(entry["same_as"]), source, estimate)
            continue
        p = _profile_p(path, name, entry, errors)
        if p:
            if not 0.0 < p[0] < 1.0:
                errors.append(SpecError(path, where, p[0], "expected a top-1 rate in (0, 1)"))
                continue
            profiles[name] = RankProfile(name=name, p=p, beta=beta, source=source, estimate=estimate)
    for name, (other, source, estimate) in pending.items():
        if other not in profiles or other == GEOMETRIC_NAME:
            errors.append(SpecError(path, f"profiles.{name}.same_as", other, "expected a measured profile of this file"))
            continue
        profiles[name] = RankProfile(name=name, p=profiles[other].p, beta=beta, source=source, estimate=estimate)
    drafters = raw.get("drafters")
    if not isinstance(drafters, dict):
        errors.append(SpecError(path, "drafters", drafters if drafters is not None else MISSING,
                                "expected a mapping of drafter kind -> profile name"))
        drafters = {}
    for kind, name in drafters.items():
        if name not in profiles:
            errors.append(SpecError(path, f"drafters.{kind}", name, f"expected one of {', '.join(sorted(profiles))}"))
    raise_collected(errors)
    return RankProfiles(profiles=profiles, drafters={str(k): str(v) for k, v in drafters.items()})
