"""The sampler a study names, always built with its seed (:func:`make_sampler`); the study's knobs as
Optuna distributions (:func:`distributions`); Optuna's logging quieted: its INFO lines, and the warnings
a sampler logs because the space is conditional (on purpose, dse.study.space)."""

from __future__ import annotations

import logging
import warnings

from ..errors import RuntimeFailure, SpecError, install_hint
from ..study import SAMPLERS, StudySpec


def distributions(study: StudySpec) -> dict:
    import optuna.distributions as od
    out = {}
    for k in study.searched:
        if k.choices:
            out[k.name] = od.CategoricalDistribution(list(k.choices))
        elif k.kind == "int":
            out[k.name] = od.IntDistribution(int(k.low), int(k.high), log=k.log, step=int(k.step or 1))
        else:
            out[k.name] = od.FloatDistribution(k.low, k.high, log=k.log, step=k.step)
    return out


def make_sampler(name: str, seed: int, population: int, n_objectives: int, *, study: StudySpec | None = None,
                 db=None, tech=None, n_trials: int | None = None, progress: bool = False, label: str = "dse run"):
    """The sampler, always with its seed (Optuna 5's default multi-objective sampler is TPE).
    NSGA-III and QMC are marked experimental by Optuna; that warning is silenced here. ``auto``
    (dse.search.breeder.BreederSampler) needs the study, database, technology and trial budget."""
    import optuna
    if name == "auto":
        if study is None:
            raise RuntimeFailure("sampler auto needs the study (make_sampler(..., study=, db=, tech=, n_trials=))")
        from .breeder import BreederSampler
        return BreederSampler(study, db, tech, seed=seed, batch=population, n_trials=n_trials or study.n_trials,
                              presearch_s=study.presearch_s, progress=progress, label=label)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = _sampler(name, seed, population)
    quiet_conditional_space(sampler)
    return sampler


class _ConditionalSpaceFilter(logging.Filter):
    """Drops the warnings an Optuna sampler logs because the search space is conditional (it is on
    purpose, dse.study.space: QMC and GP sample a conditional knob on its own), told apart by the
    function that logs them, not by their text (Optuna 5 changed the text and a text filter let
    475 lines through for 300 QMC trials). Every other record passes."""

    FUNCS = frozenset({"infer_relative_search_space", "_log_independent_sampling"})

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and record.funcName in self.FUNCS)


def quiet_conditional_space(sampler) -> None:
    """Attach _ConditionalSpaceFilter to the logger of the sampler's module (and of its bases'),
    once. Samplers that take ``warn_independent_sampling=False`` get it too (see _sampler)."""
    for cls in type(sampler).__mro__:
        if cls.__module__.startswith("optuna."):
            log = logging.getLogger(cls.__module__)
            if not any(isinstance(f, _ConditionalSpaceFilter) for f in log.filters):
                log.addFilter(_ConditionalSpaceFilter())


def _sampler(name: str, seed: int, population: int):
    """NSGA-II/III are Optuna's, memoised per generation (dse.search.samplers: the same choices for
    the same seed, without the O(n) scans per ask)."""
    import optuna

    from .samplers import MemoNSGAIIISampler, MemoNSGAIISampler
    if name == "nsga2":
        return MemoNSGAIISampler(population_size=population, seed=seed)
    if name == "nsga3":
        return MemoNSGAIIISampler(population_size=population, seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":       # the space is conditional on purpose: no warning per conditional knob and trial
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed, warn_independent_sampling=False)
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise SpecError(None, "sampler", "gp", f"needs PyTorch: {install_hint('gp')} (or pick nsga2, tpe, ...)") from None
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    raise SpecError(None, "sampler", name, f"expected one of {', '.join(SAMPLERS)}")


logging.getLogger("optuna").setLevel(logging.WARNING)
