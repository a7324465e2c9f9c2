"""One design from names and numbers: the code behind `dse eval` (and the Python one-liner).

Specs in, the vector model on length-1 arrays, a dict of display-unit values out.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .database import Database, load_database
from .errors import SpecError
from .model.arrays import DesignBatch, HardwareArrays
from .model.evaluate import Metrics, evaluate
from .model.transformer import WEIGHT_FORMATS, default_kv_dtype
from .specs import (
    DTYPES,
    AcceptanceSpec,
    DeviceSpec,
    DrafterSpec,
    ModelSpec,
    RuntimeSpec,
    Workload,
    override,
    spec_fields,
)

#: `--set` fields that belong to the runtime rather than the device
RUNTIME_FIELDS = ("kernels_per_layer", "spec_overhead_us", "ngram_draft_us", "memory_reserve_fraction",
                  "sequence_overhead_us", "request_overhead_us", "roofline_p", "int8_stream_factor",
                  "int4_stream_factor")


def parse_drafter(spec: str, target: ModelSpec, db: Database, where: str = "--draft") -> DrafterSpec:
    """'none' | 'ngram' | 'eagle' | 'medusa:H' | 'early-exit:L' | a model name or file."""
    s = str(spec).strip()
    low = s.lower()
    if low in ("none", "ngram", "eagle"):
        return DrafterSpec(kind=low, label=low)
    head, _, arg = low.partition(":")
    if head in ("medusa", "early-exit"):
        hi = 64 if head == "medusa" else target.num_layers - 1
        try:
            val = int(arg)
        except ValueError:
            val = None
        if val is None or not 1 <= val <= hi:
            raise SpecError(None, where, s, f"expected {head}:N with N an integer in [1, {hi}]"
                            + (f" (target has {target.num_layers} layers)" if head == "early-exit" else ""))
        if head == "medusa":
            return DrafterSpec(kind="medusa", label=low, heads=val)
        return DrafterSpec(kind="early-exit", label=low, exit_layer=val)
    model = db.model(s, where=f"{where}: ")
    if model.kind != "decoder":
        raise SpecError(None, where, s, f"{model.name} is a {model.kind}; use --draft "
                        f"{'eagle' if model.kind == 'eagle-head' else 'medusa:H'} to draft with it")
    return DrafterSpec(kind="model", label=model.name, model=model)


def make_acceptance(alpha=None, per_position=None, tau=None, *, where: str = "") -> AcceptanceSpec:
    """Exactly one of alpha in [0, 1], per-position rates in [0, 1], or tau >= 1."""
    given = [x is not None for x in (alpha, per_position, tau)]
    names = f"{where}alpha / {where}acceptance / {where}tau"
    if sum(given) != 1:
        raise SpecError(None, names, None if not any(given) else "several",
                        "give exactly one: alpha (i.i.d. conditional acceptance rate), "
                        "per-position rates, or tau (mean tokens per target pass)")
    if alpha is not None:
        a = _number(alpha, f"{where}alpha")
        if not 0.0 <= a <= 1.0:
            raise SpecError(None, f"{where}alpha", alpha, "expected a number in [0, 1]")
        return AcceptanceSpec(kind="alpha", alpha=a)
    if per_position is not None:
        if isinstance(per_position, str):
            per_position = [p for p in per_position.split(",") if p.strip()]
        rates = tuple(_number(x, f"{where}acceptance") for x in per_position)
        if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
            raise SpecError(None, f"{where}acceptance", list(per_position),
                            "expected a non-empty list of rates, each in [0, 1]")
        return AcceptanceSpec(kind="per_position", per_position=rates)
    t = _number(tau, f"{where}tau")
    if not t >= 1.0:
        raise SpecError(None, f"{where}tau", tau, "expected a number >= 1 (it counts the bonus token)")
    return AcceptanceSpec(kind="tau", tau=t)


def _number(x, field: str) -> float:
    try:
        if isinstance(x, bool):
            raise ValueError
        v = float(x)
    except (TypeError, ValueError):
        raise SpecError(None, field, x, "expected a number") from None
    if not math.isfinite(v):
        raise SpecError(None, field, x, "expected a finite number")
    return v


def hardware_arrays(dev: DeviceSpec, rt: RuntimeSpec, chips, dtype: str,
                    kv_dtype: str | None = None) -> HardwareArrays:
    """A device and runtime as length-1 (or broadcast) arrays; a device's own fixed costs
    (kernel_launch_us, step_overhead_us) override the runtime's. Attention runs at the
    KV dtype's rate (16-bit unless given)."""
    return HardwareArrays(
        chips=np.atleast_1d(chips), capacity_bytes=dev.memory_bytes, mem_bw_bytes_s=dev.mem_bw_bytes_s,
        peak_flop_s=dev.peak_flop_s(WEIGHT_FORMATS[dtype].compute_dtype), mem_efficiency=dev.mem_efficiency,
        compute_efficiency=dev.compute_efficiency, link_bw_bytes_s=dev.link_bw_bytes_s,
        link_latency_s=dev.link_latency_s,
        kernel_launch_s=rt.kernel_launch_s if dev.kernel_launch_s is None else dev.kernel_launch_s,
        kernels_per_layer=rt.kernels_per_layer,
        step_overhead_s=rt.step_overhead_s if dev.step_overhead_s is None else dev.step_overhead_s,
        spec_overhead_s=rt.spec_overhead_s, ngram_draft_s=rt.ngram_draft_s,
        memory_reserve_fraction=rt.memory_reserve_fraction, link_efficiency=dev.link_efficiency,
        sequence_overhead_s=rt.sequence_overhead_s, request_overhead_s=rt.request_overhead_s,
        roofline_p=rt.roofline_p, peak_attention_flop_s=dev.peak_flop_s(kv_dtype or default_kv_dtype(dtype)),
        int8_stream_factor=rt.int8_stream_factor, int4_stream_factor=rt.int4_stream_factor)


def apply_overrides(dev: DeviceSpec, rt: RuntimeSpec, assignments: dict[str, Any]):
    """`--set FIELD=VALUE`: device fields, then runtime fields; unknown names list the allowed."""
    dev_fields, rt_fields = spec_fields(DeviceSpec), spec_fields(RuntimeSpec)
    numeric = sorted(k for k, (_, i) in dev_fields.items() if i.kind in ("float", "int"))
    numeric += [k for k in RUNTIME_FIELDS]
    d_set, r_set = {}, {}
    for key, value in assignments.items():
        if key in dev_fields and dev_fields[key][1].kind in ("float", "int"):
            d_set[key] = _number(value, f"--set {key}")
        elif key in rt_fields and rt_fields[key][1].kind in ("float", "int"):
            r_set[key] = _number(value, f"--set {key}")
        else:
            raise SpecError(None, f"--set {key}", value, f"unknown field; allowed: {', '.join(numeric)}")
    return override(dev, d_set, "--set") if d_set else dev, override(rt, r_set, "--set") if r_set else rt


def evaluate_design(*, hw: str, target: str, draft: str = "none", chips: int = 1,
                    draft_hw: str | None = None, draft_chips: int = 1, k: int | str = "auto",
                    alpha: float | None = None, acceptance=None, tau: float | None = None,
                    tree_nodes: int = 0, batch: int = 1, prompt: int = 128, output: int = 128,
                    dtype: str = "bf16", kv_dtype: str | None = None, temperature: float = 0.0,
                    overlap: bool = False, runtime: str | None = None, baseline_ms: float | None = None,
                    continuous: bool = False,
                    set_fields: dict[str, Any] | None = None, k_max: int = 8,
                    db: Database | None = None) -> dict[str, Any]:
    """Evaluate one design; returns the `dse eval --json` object (display units, None for null).

    Example:
        >>> r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
        >>> r["fits"], r["k"], round(r["tau"], 3)
        (True, 4, 3.362)
    """
    db = db or load_database()
    for name, value, lo in (("--chips", chips, 1), ("--draft-chips", draft_chips, 1), ("--batch", batch, 1),
                            ("--prompt", prompt, 0), ("--output", output, 1), ("--tree-nodes", tree_nodes, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise SpecError(None, name, value, f"expected an integer >= {lo}")
    kv_dtype = kv_dtype or default_kv_dtype(dtype)
    for name, value, allowed in (("--dtype", dtype, tuple(WEIGHT_FORMATS)), ("--kv-dtype", kv_dtype, DTYPES)):
        if value not in allowed:
            raise SpecError(None, name, value, f"expected one of {', '.join(allowed)}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise SpecError(None, "--temperature", temperature, "expected a number >= 0")
    dev = db.device(hw, where="--hw: ")
    rt = db.runtime(runtime or dev.default_runtime, where="--runtime: ")
    dev, rt = apply_overrides(dev, rt, set_fields or {})
    tgt = db.model(target, where="--target: ")
    if tgt.kind != "decoder":
        raise SpecError(None, "--target", target, f"{tgt.name} is a {tgt.kind}, not a model to serve")
    drafter = parse_drafter(draft, tgt, db)
    k_val = _parse_k(k, drafter)
    if drafter.kind == "none":
        acc = AcceptanceSpec(kind="alpha", alpha=0.0)
        if any(x is not None for x in (alpha, acceptance, tau)):
            raise SpecError(None, "--alpha/--acceptance/--tau", "given", "acceptance needs a drafter (--draft)")
    else:
        acc = make_acceptance(alpha, acceptance, tau, where="--")
        if acc.kind == "tau" and k_val == 0:
            raise SpecError(None, "--k", "auto", "--tau is measured at one k: give --k with --tau")
        if acc.kind == "tau" and acc.tau > k_val + 1:
            raise SpecError(None, "--tau", acc.tau, f"expected a number in [1, k+1 = {k_val + 1}]")
        if acc.kind == "per_position" and k_val > len(acc.per_position):
            raise SpecError(None, "--k", k_val, f"expected at most {len(acc.per_position)} "
                            "(one acceptance rate per drafted position)")
        if drafter.kind == "medusa" and k_val > drafter.heads:
            raise SpecError(None, "--k", k_val, f"expected at most {drafter.heads} (one token per Medusa head)")
    if tree_nodes and drafter.kind in ("none", "ngram", "medusa"):
        raise SpecError(None, "--tree-nodes", tree_nodes, "trees need a model, early-exit or eagle drafter")
    if tree_nodes and k_val and tree_nodes < k_val:
        raise SpecError(None, "--tree-nodes", tree_nodes, f"expected >= k = {k_val} (one node per level at least)")
    if chips > 1 and dev.link_bw_bytes_s <= 0:
        raise SpecError(None, "--chips", chips, f"{dev.name} has no scale-up link (link_bw_gb_s = 0); use 1")
    target_hw = hardware_arrays(dev, rt, chips, dtype, kv_dtype)
    on_chip = draft_hw is not None
    if on_chip:
        if not drafter.can_use_draft_chip:
            raise SpecError(None, "--draft-hw", draft_hw, f"the {drafter.kind} drafter needs the target's hidden "
                            "states (or no weights) and runs on the target chips; a draft chip needs a draft model")
        ddev = db.device(draft_hw, where="--draft-hw: ")
        if ddev.link_bw_bytes_s <= 0:
            raise SpecError(None, "--draft-hw", draft_hw, f"{ddev.name} has no link (link_bw_gb_s = 0) to reach the target")
        draft_arrays = hardware_arrays(ddev, db.runtime(runtime or ddev.default_runtime), draft_chips, dtype,
                                       kv_dtype)
        link_bw, link_lat = min(ddev.link_bw_bytes_s, dev.link_bw_bytes_s or ddev.link_bw_bytes_s), ddev.link_latency_s
    else:
        ddev, draft_arrays, link_bw, link_lat = None, target_hw, 0.0, 0.0
    if overlap and not on_chip:
        raise SpecError(None, "--overlap", True, "overlapped drafting needs a draft chip (--draft-hw)")
    w = Workload(target=tgt, drafter=drafter, acceptance=acc, dtype=dtype, kv_dtype=kv_dtype,
                 temperature=float(temperature), overlap=overlap, tree_nodes=tree_nodes,
                 continuous=bool(continuous),
                 k_max=k_max if drafter.kind != "medusa" else drafter.heads)
    design = DesignBatch(target=target_hw, draft=draft_arrays, draft_on_chip=on_chip,
                         draft_link_bw_bytes_s=link_bw, draft_link_latency_s=link_lat,
                         batch=batch, prompt_tokens=prompt, output_tokens=output, k=k_val)
    anchor = None
    if baseline_ms is not None:
        design, anchor = anchor_to_baseline(design, w, _number(baseline_ms, "--baseline-ms") * 1e-3)
    m = evaluate(design, w)
    out = to_record(m, 0)
    out.update(hw=dev.name, chips=chips, target=tgt.name, draft=drafter.label,
               draft_hw=ddev.name if ddev else None, draft_chips=draft_chips if ddev else None,
               runtime=rt.name, dtype=dtype, kv_dtype=kv_dtype, weight_format=WEIGHT_FORMATS[dtype].desc,
               **_cost_and_price(dev, chips, db), batch=batch,
               prompt_tokens=prompt, output_tokens=output, temperature=float(temperature), overlap=overlap,
               batching="continuous" if continuous else "static",
               tree_nodes=tree_nodes or None, acceptance=acc.describe() if drafter.kind != "none" else None,
               alpha_meaning=("i.i.d. conditional per-token acceptance rate (Leviathan et al. 2023)"
                              if acc.kind == "alpha" else
                              "i.i.d. rate that gives the same tau at this k (input was "
                              f"{'per-position rates' if acc.kind == 'per_position' else 'tau'})")
               if drafter.kind != "none" else None,
               k_mode="auto" if k_val == 0 else "fixed", anchor=anchor)
    return out


def _cost_and_price(dev: DeviceSpec, chips: int, db: Database) -> dict[str, float | None]:
    """The target group's manufacturing-cost estimate (the synthesised-chip estimator applied to
    the known part, technology.known_part_estimate) and street price, both x chips (None when
    unknown)."""
    from .model.technology import known_part_estimate
    from .techdb import load_technology
    cost = known_part_estimate(load_technology(db.root), dev)[0] * chips
    return {"cost_usd": cost if math.isfinite(cost) else None,
            "price_usd": dev.price_usd * chips if dev.price_usd else None}


def _parse_k(k, drafter: DrafterSpec) -> int:
    if drafter.kind == "none":
        return 0
    if isinstance(k, str) and k.strip().lower() == "auto":
        return 0
    try:
        val = int(k)
        if isinstance(k, float) and not float(k).is_integer():
            raise ValueError
    except (TypeError, ValueError):
        raise SpecError(None, "--k", k, "expected an integer >= 1 or 'auto'") from None
    if val < 1:
        raise SpecError(None, "--k", k, "expected an integer >= 1 or 'auto'")
    return val


def to_record(m: Metrics, i: int) -> dict[str, Any]:
    """Row i of Metrics as JSON-ready display values (NaN -> None)."""
    out = {}
    for name, arr in m.columns().items():
        v = arr[i].item() if hasattr(arr[i], "item") else arr[i]
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[name] = v
    return out


def anchor_to_baseline(design: DesignBatch, w: Workload, baseline_s: float):
    """Scale the target runtime's fixed costs (kernel launch, step, spec overhead) so the
    autoregressive step equals a measured ``baseline_s``: T = T_var + s*T_fixed, s = (X - T_var)/T_fixed."""
    from .model.roofline import step_cost
    from .model.transformer import step_kwargs
    hw = design.target
    S = design.prompt_tokens + 0.5 * design.output_tokens
    kw = dict(batch=design.batch, q=1.0, context=S, **step_kwargs(w.dtype, w.kv_dtype))
    full = step_cost(w.target, hw, **kw)
    no_fixed = dataclasses.replace(hw, kernel_launch_s=np.zeros_like(hw.kernel_launch_s),
                                   step_overhead_s=np.zeros_like(hw.step_overhead_s),
                                   sequence_overhead_s=np.zeros_like(hw.sequence_overhead_s))
    var = step_cost(w.target, no_fixed, **kw).time_s      # roofline + all-reduces
    fixed = full.time_s - var
    if float(var[0]) >= baseline_s or float(fixed[0]) <= 0:
        raise SpecError(None, "--baseline-ms", baseline_s * 1e3,
                        f"expected more than {float(var[0]) * 1e3:.3f} ms, the model's time without fixed costs "
                        "at these efficiencies (lower mem_efficiency with --set instead)")
    s = float((baseline_s - var[0]) / fixed[0])
    scaled = dataclasses.replace(hw, kernel_launch_s=hw.kernel_launch_s * s, step_overhead_s=hw.step_overhead_s * s,
                                 sequence_overhead_s=hw.sequence_overhead_s * s, spec_overhead_s=hw.spec_overhead_s * s)
    draft = design.draft if bool(design.draft_on_chip[0]) else scaled
    new = dataclasses.replace(design, target=scaled, draft=draft)
    return new, {"scaled": ["kernel_launch_us", "step_overhead_us", "sequence_overhead_us", "spec_overhead_us"],
                 "factor": s,
                 "baseline_ms": baseline_s * 1e3}
