"""Which knobs act on a design: the conditional search space of a study.

A knob is *inactive* for a design when no value of it changes that design (issue 11):

- every draft-chip knob when ``draft_chip_enabled`` is false;
- the target's ``link_bw_gb_s`` on one chip without a draft chip (no peer to reach; with a
  draft chip the link is one end of the draft link), and its ``link_latency_us`` and
  ``link_class`` on one chip (the draft link's latency is the draft chip's);
- ``scale_up_domain`` on one chip, and ``scale_out_bw_gb_s`` where the chips fit in one domain;
- ``memory_stacks`` with SRAM-only memory, ``stack_height`` with anything but HBM
  (MODEL.md section 5: the model ignores both there);
- with the draft a knob (``workload.draft`` a list): ``k`` and ``tree_nodes`` without a drafter
  (draft ``none``); the draft chip (``draft_chip_enabled`` and so every draft-chip knob) unless
  the row's draft is a draft model (only an independent model lives on a draft chip);
  ``draft_exit_layer`` unless the row's draft is the early-exit range.

An inactive knob is null in results and not sampled; it is evaluated at its neutral value:
link bandwidth and latency 0 (a chip with no peer carries no link, so pays no link power),
otherwise the knob's first choice or low end (which the model then ignores). Two rows with
equal active knobs are therefore the same design.
"""

from __future__ import annotations

import numpy as np

from .spec import Knob, StudySpec

#: knob keys whose activity depends on other knobs (with every draft-chip knob but `enabled`)
CONDITIONAL_KEYS = ("link_bw_gb_s", "link_latency_us", "link_class", "scale_up_domain", "scale_out_bw_gb_s",
                    "memory_stacks", "stack_height")
#: keys that decide other knobs' activity: they are sampled first
CONTROL_KEYS = ("draft", "enabled", "chips", "memory", "device", "scale_up_domain")
#: neutral value of an inactive knob whose value would otherwise still count (link power; a draft
#: chip for a draft that cannot use one)
NEUTRAL = {"link_bw_gb_s": 0.0, "link_latency_us": 0.0, "enabled": False}


def is_conditional(k: Knob) -> bool:
    """Can this knob be inactive for some design? (Its results column is then nullable.)"""
    return k.conditional or k.key in CONDITIONAL_KEYS or (k.section == "draft_chip" and k.key != "enabled")


def sampling_order(study: StudySpec) -> list[Knob]:
    """Searched knobs with the controlling ones first: the draft, enabled, then chips/memory/device,
    then the rest."""
    def rank(k: Knob) -> int:
        return 0 if k.key == "draft" else 1 if k.key == "enabled" else 2 if k.key in CONTROL_KEYS else 3
    return sorted(study.searched, key=rank)


def neutral_value(k: Knob):
    """The value an inactive knob is evaluated at."""
    if k.key in NEUTRAL:
        return NEUTRAL[k.key]
    if k.fixed is not None:
        return k.fixed
    return k.choices[0] if k.choices else k.low


def active_masks(study: StudySpec, values: dict, n: int, names: dict[str, tuple] | None = None
                 ) -> dict[str, np.ndarray]:
    """For every conditional knob present in ``values`` (arrays of length n, one per knob
    name; a missing controller takes its fixed value), a bool array: does it act on the design?
    A categorical value may be a name or an int64 code into ``names[knob]`` (by default
    ``knob_names``).

    >>> from dse.study import parse_study
    >>> s = parse_study({"name": "d", "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b",
    ...                                            "acceptance": {"alpha": 0.8}},
    ...                  "space": {"target_chip": {"peak_tflops": 500, "memory": ["hbm3e"]},
    ...                            "draft_chip": {"enabled": [True, False], "peak_tflops": 50,
    ...                                           "memory": ["sram", "lpddr5x"]}},
    ...                  "objectives": [{"metric": "spec_ms_per_token"}]}, "example")
    >>> m = active_masks(s, {"draft_chip_enabled": np.array([True, False]),
    ...                      "draft_chip_memory": np.array(["sram", "sram"])}, 2)
    >>> m["draft_chip_memory_stacks"].tolist(), m["draft_chip_peak_tflops"].tolist()
    ([False, False], [True, False])
    >>> m["target_chip_link_bw_gb_s"].tolist()      # one target chip: the link serves the draft chip only
    [True, False]
    """
    def get(name, default):
        k = study.knob(name)
        if name in values and values[name] is not None:
            v = np.asarray(values[name])
            if v.dtype == object:       # a controller that is itself inactive (None) acts at its neutral value
                none = np.equal(v, None)
                if none.any():
                    v = np.where(none, neutral_value(k) if k is not None else default, v)
            return v
        v = k.fixed if k is not None and k.fixed is not None else default
        return np.full(n, v, dtype=object if isinstance(v, str) else None)

    def memory_kind(name):
        """Memory kind per design, looked up once per distinct memory type."""
        knob = study.knob(name)
        table = (names or {}).get(name) or (knob_names(knob) if knob is not None else ())
        table, codes = category_codes(get(name, "hbm3e"), table)
        return np.array([kinds.get(str(m), "hbm") for m in table], dtype=object)[codes]

    kinds = {m.name: m.kind for m in study.tech.memory} if study.tech is not None else {}
    drafting = model_draft = exit_range = np.ones(n, dtype=bool)
    dk = study.knob("draft")
    if dk is not None and dk.searched:      # the kind of each row's draft, looked up once per choice
        table, codes = category_codes(get("draft", dk.choices[0]), (names or {}).get("draft") or knob_names(dk))
        dkind = np.array([study.drafts.kind(str(lab)) if str(lab) in study.drafts.labels else "none"
                          for lab in table], dtype=object)
        dlabel = np.array([str(lab) for lab in table], dtype=object)
        drafting, model_draft = (dkind != "none")[codes], (dkind == "model")[codes]
        exit_range = (dlabel == "early-exit")[codes]
    on = _as_bool(get("draft_chip_enabled", False)) if study.knob("draft_chip_enabled") else np.zeros(n, bool)
    on = on & model_draft
    out: dict[str, np.ndarray] = {}
    by_draft = {"k": drafting, "tree_nodes": drafting, "draft_chip_enabled": model_draft,
                "draft_exit_layer": exit_range}
    for k in study.knobs:
        if k.conditional and k.name in by_draft:
            out[k.name] = np.array(by_draft[k.name], dtype=bool, copy=True)
            continue
        if not is_conditional(k) or k.section not in ("target_chip", "draft_chip"):
            continue
        prefix = k.section + "_"
        group = on if k.section == "draft_chip" else np.ones(n, dtype=bool)
        if k.key == "link_bw_gb_s":
            act = (get(prefix + "chips", 1).astype(np.int64) > 1) | on
        elif k.key in ("link_latency_us", "link_class"):
            act = (get(prefix + "chips", 1).astype(np.int64) > 1) | (on if k.section == "draft_chip" else False)
        elif k.key == "scale_up_domain":
            act = get(prefix + "chips", 1).astype(np.int64) > 1
        elif k.key == "scale_out_bw_gb_s":
            act = get(prefix + "chips", 1).astype(np.int64) > get(prefix + "scale_up_domain", 8).astype(np.int64)
        elif k.key in ("memory_stacks", "stack_height") and study.knob(prefix + "memory") is not None:
            kind = memory_kind(prefix + "memory")
            act = (kind != "sram") if k.key == "memory_stacks" else (kind == "hbm")
        else:
            act = np.ones(n, dtype=bool)
        out[k.name] = np.asarray(act, dtype=bool) & group
    return out


def _as_bool(v: np.ndarray) -> np.ndarray:
    """A knob's values as bools; an object array's missing values (None, pandas NA where a
    results column is null: the knob did not act) are False."""
    v = np.asarray(v)
    if v.dtype != object:
        return v.astype(bool)
    return np.fromiter(((x is True) or (x is np.True_) for x in v.ravel()), dtype=bool, count=v.size).reshape(v.shape)


def fill_inactive(study: StudySpec, values: dict[str, np.ndarray], n: int, names: dict[str, tuple] | None = None,
                  masks: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every knob with inactive entries (None, NaN or any value) set to its neutral value, and
    the activity masks (conditional knobs only; the others act on every design). A categorical
    knob given as integer codes into ``names[knob]`` (by default ``knob_names``) gets the
    neutral value's code. ``masks``: active_masks of these values when the caller has them."""
    masks = active_masks(study, values, n, names) if masks is None else masks
    out = dict(values)
    for name, act in masks.items():
        if act.all() or name not in out:
            continue
        k = study.knob(name)
        v = np.asarray(out[name])
        dtype = object if k.kind == "cat" else bool if k.kind == "bool" else np.int64 if k.kind == "int" else np.float64
        if k.kind == "cat" and v.dtype.kind in "iu":
            out[name] = np.where(act, v, ((names or {}).get(name) or knob_names(k)).index(neutral_value(k)))
        elif v.dtype != object and k.kind != "cat":     # numbers stay numbers: no object round trip
            out[name] = np.where(act, v, neutral_value(k)).astype(dtype)
        else:
            out[name] = np.where(act, v, np.asarray(neutral_value(k), dtype=object)).astype(dtype)
    return out, masks


def knob_names(k: Knob) -> tuple:
    """The names a categorical knob's integer codes index: its choices, or its fixed value."""
    return tuple(k.choices) if k.choices else (k.fixed,)


def category_codes(values, names=()) -> tuple[tuple, np.ndarray]:
    """(names, codes): categorical values as int64 indices into ``names``, extended by any
    value not in it (as text, sorted). Integer values are taken as codes already; names are
    looked up once per design through a dict, never through np.unique on objects."""
    v = np.asarray(values)
    if v.dtype.kind in "iu":
        return tuple(names), v.astype(np.int64, copy=False)
    names = tuple(names)
    index = {nm: i for i, nm in enumerate(names)}
    flat = v.ravel().tolist()
    try:
        codes = np.fromiter(map(index.__getitem__, flat), dtype=np.int64, count=len(flat))
    except (KeyError, TypeError):
        names = names + tuple(sorted({str(x) for x in flat} - {str(nm) for nm in names}))
        index = {str(nm): i for i, nm in enumerate(names)}
        codes = np.fromiter((index[str(x)] for x in flat), dtype=np.int64, count=len(flat))
    return names, codes.reshape(v.shape)
