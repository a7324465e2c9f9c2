"""Plain-text tables for the terminal (no pandas, so `dse eval` stays fast)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:
            return "-"
        a = abs(v)
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.1f}"
        if a >= 1:
            return f"{v:.3g}" if a < 10 else f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


def column_decimals(values: list[Any]) -> int | None:
    """One format per column: decimals that give the smallest non-zero value 3 significant
    digits (0 to 3); None for a column that is not all numbers."""
    nums = [v for v in values if v is not None and not (isinstance(v, float) and v != v)]
    if not nums or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in nums):
        return None
    if all(float(v).is_integer() for v in nums):
        return 0
    small = min(abs(v) for v in nums if v) if any(nums) else 1.0
    return int(min(3, max(0, 2 - math.floor(math.log10(small)))))


def table(rows: list[dict], cols: list[str]) -> str:
    """Left-aligned text, right-aligned numbers in one format per column, one header line."""
    decimals = [column_decimals([r.get(c) for r in rows]) for c in cols]

    def cell(v, d):
        if d is None or v is None or (isinstance(v, float) and v != v):
            return fmt(v)
        return f"{v:,.{d}f}"
    cells = [[cell(r.get(c), d) for c, d in zip(cols, decimals)] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    numeric = [d is not None for d in decimals]

    def line(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in cells])


def eval_table(r: dict) -> str:
    """The readable form of one `dse eval` result: fit first, then the speculative accounting."""
    ep = f", experts over {r['ep']} EP ranks" if r.get("ep", 1) > 1 else ""
    out = [f"{r['target']} on {r['chips']}x {r['hw']}{ep}  ({r['runtime']} runtime, {r['dtype']} weights, "
           f"{r['kv_dtype']} KV; batch {r['batch']}, prompt {r['prompt_tokens']}, output {r['output_tokens']})"]
    if str(r.get("weight_math", "native")).startswith("weight-only"):
        out.append(f"note: {r['weight_math']}")
    dom = r.get("scale_up_domain")
    if dom and r["chips"] > dom:
        out.append(f"note: {r['chips']} chips are {r['chips'] // dom} scale-up domains of {dom}: all-reduces cross "
                   "the scale-out network (hierarchical)")
    if r["draft"] != "none":
        where = (f"on {r['draft_chips']}x {r['draft_hw']} (draft chip"
                 f"{', overlapped' if r['overlap'] else ''})" if r["draft_hw"] else "on the target chips")
        tree = (f", tree of {r['tree_nodes']} nodes (per depth {r['tree_shape'] or '-'}; rank profile "
                f"{r['rank_profile']})" if r.get("tree_nodes") else "")
        acc = r["acceptance"] if r.get("acceptance_origin") in (None, "given") else r["acceptance_origin"]
        task = f"task {r['task']}, T={r['temperature']:g}; " if r.get("acceptance_origin") not in (None, "given") else ""
        out.append(f"draft {r['draft']} {where}; {task}{acc}; k={r['k']} ({r['k_mode']}){tree}")
    out.append("")
    out += memory_lines(r)
    if r.get("datastore_gb"):
        out.append(f"  datastore  {r['datastore_gb']:.2f} GB in host memory (not device memory)")
    if not r["fits"]:
        out.append("latency      - (the design does not fit; no latency is reported)")
        return "\n".join(out)
    out.append(f"baseline     {r['baseline_ms_per_token']:.3f} ms/token  {fmt(r['baseline_tokens_per_s'])} tok/s  "
               f"AI {fmt(r['baseline_arithmetic_intensity'])} FLOP/B, {r['baseline_bound']}-bound")
    if r["draft"] == "none":
        out.append(_overhead_line(r, r["baseline_ms_per_token"]))
        out.append(energy_line(r))
        out.append(f"TTFT         {r['ttft_ms']:.2f} ms   request {r['request_latency_ms']:.1f} ms")
        return "\n".join(out)
    banded = r.get("speedup_low") is not None and r["speedup_low"] != r["speedup_high"]
    band = (f"  band {r['speedup_low']:.3f}x-{r['speedup_high']:.3f}x "
            f"({r['spec_ms_per_token_high']:.3f}-{r['spec_ms_per_token_low']:.3f} ms/token)" if banded else "")
    out.append(f"speculative  {r['spec_ms_per_token']:.3f} ms/token  {fmt(r['tokens_per_s'])} tok/s  "
               f"speedup {r['speedup']:.3f}x (bound {r['speedup_bound']:.3f}x){band}")
    out.append(_overhead_line(r, r["spec_ms_per_token"]))
    out.append(f"iteration    draft {r['draft_ms_per_iter']:.3f} ms (AI {fmt(r['draft_arithmetic_intensity'])}, "
               f"{r['draft_bound']}) + verify {r['verify_ms_per_iter']:.3f} ms "
               f"(AI {fmt(r['verify_arithmetic_intensity'])}, {r['verify_bound']}) + link "
               f"{r['link_ms_per_iter']:.3f} ms -> {r['iter_ms']:.3f} ms")
    alpha = "-" if r["alpha"] is None else f"{r['alpha']:.3f}"
    reach = "P(deepest level accepted)" if r.get("tree_nodes") else "P(all k accepted)"
    window = f"  P(window usable) {r['p_window']:.3f}" if r.get("overlap") and r.get("p_window") is not None else ""
    tband = f" ({r['tau_low']:.3f}-{r['tau_high']:.3f})" if banded else ""
    out.append(f"accounting   tau {r['tau']:.3f}{tband} tokens/pass  alpha {alpha}  k {r['k']}  "
               f"c {r['draft_cost_ratio']:.3f}  {reach} {r['p_all_accepted']:.3f}{window}")
    out.append(energy_line(r))
    out.append(f"TTFT         {r['ttft_ms']:.2f} ms   request {r['request_latency_ms']:.1f} ms")
    if r.get("anchor"):
        a = r["anchor"]
        out.append(f"anchor       baseline set to {a['baseline_ms']:.3f} ms: scaled {', '.join(a['scaled'])} "
                   f"by {a['factor']:.3f}")
    return "\n".join(out)


def _overhead_line(r: dict, per_token_ms: float) -> str:
    """The software stack's share of a token: fixed costs (launches, per-step, per-iteration,
    per-sequence) over the tokens of an iteration."""
    ovh = r["overhead_ms_per_token"]
    share = ovh / per_token_ms if per_token_ms else 0.0
    return (f"overhead     {ovh:.3f} ms/token ({100 * share:.0f}%) fixed costs of the {r['runtime']} runtime "
            "(kernel launches, per step, per iteration)")


def memory_lines(r: dict) -> list[str]:
    """The capacity check: what the model needs (weights + KV caches) and the runtime's reserve apart,
    against the capacity; for a group of chips, per chip beside the group (state every chip holds whole
    counts once per chip in the group figures), and whether more chips could help."""
    t = r["chips"]
    cap_chip = r["memory_capacity_gb"] / t
    gib = f" ({cap_chip * 1e9 / 2 ** 30:.4g} GiB)"
    pct = f"{100 * r['memory_reserve_gb'] / r['memory_capacity_gb']:.0f}%" if r["memory_capacity_gb"] else "-"
    short = r["memory_shortfall_gb"]
    fit = "fits" if not short else "DOES NOT FIT"
    where = f"{gib}" if t == 1 else f" on {t} chips"
    out = [f"memory       {r['memory_required_gb']:.2f} GB weights + KV + {r['memory_reserve_gb']:.2f} GB runtime "
           f"reserve ({pct}) of {r['memory_capacity_gb']:.2f} GB{where}   {fit}"]
    if t > 1:
        out.append(f"  per chip   {r['chip_memory_required_gb']:.2f} GB + {r['memory_reserve_gb'] / t:.2f} GB reserve of "
                   f"{cap_chip:.2f} GB{gib}"
                   + (f": short by {r['chip_memory_shortfall_gb']:.2f} GB a chip ({short:.2f} GB over {t} chips)"
                      if short else ""))
    elif short:
        out[-1] += f": short by {short:.2f} GB"
    floor = r.get("chip_memory_floor_gb")
    if short and floor is not None and floor + r["memory_reserve_gb"] / t > cap_chip:
        out.append(f"  more chips cannot help: a chip holds at least {floor:.2f} GB at any chip count "
                   "(replicated weights and KV) + its reserve")
    if r["draft"] != "none" and r["draft_memory_required_gb"]:
        what = "head weights" if str(r["draft"]).startswith(("medusa", "hydra")) else "weights + KV"
        if r.get("draft_hw"):
            short_d = r.get("draft_memory_shortfall_gb") or 0.0
            out.append(f"  draft      {r['draft_memory_required_gb']:.2f} GB ({what}) + "
                       f"{r['draft_memory_reserve_gb']:.2f} GB reserve on a device of "
                       f"{r['draft_memory_capacity_gb']:.2f} GB"
                       + (f"   DRAFT CHIP DOES NOT FIT: short by {short_d:.2f} GB" if short_d else ""))
        else:
            out.append(f"  draft      {r['draft_memory_required_gb']:.2f} GB of that ({what}), on the target chips")
    return out


def energy_line(r: dict) -> str:
    """Energy per generated token (speculative, and the baseline's when speculating), tokens per joule,
    and the mean power it implies (energy per token x tokens/s) beside the provisioned power_w."""
    e = r.get("energy_j_per_token")
    if e is None:
        return (f"energy       - (no energy model for {r['hw']}: its process node or memory type is outside "
                "hardware_db/technology)")
    base = (f" (baseline {r['baseline_energy_j_per_token']:#.3g} J/token)"
            if r["draft"] != "none" and r.get("baseline_energy_j_per_token") is not None else "")
    draw = e * r["tokens_per_s"]
    cap = f" of {fmt(r['power_w'])} W provisioned" if r.get("power_w") is not None and not r.get("draft_hw") else ""
    return f"energy       {e:#.3g} J/token  {r['tokens_per_j']:#.3g} tokens/J{base}; draws {fmt(draw)} W{cap}"


def short_name(column: str) -> str:
    """params_target_chip_memory -> memory, params_draft_chip_memory -> draft.memory."""
    return column.removeprefix("params_").replace("target_chip_", "").replace("draft_chip_", "draft.")


def front_text(columns: Mapping[str, list]) -> str:
    """A front table (column name -> values) as text, every column right-aligned under its short
    name: floats to 4 significant digits, integers whole; a null or NaN (a knob that does not act
    on the design, dse.study.space) shows as '-'."""
    cells = {short_name(c): [_front_cell(v) for v in vals] for c, vals in columns.items()}
    widths = [max([len(h)] + [len(v) for v in vals]) for h, vals in cells.items()]
    rows = [list(cells)] + [list(r) for r in zip(*cells.values())]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows)


def _front_cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
