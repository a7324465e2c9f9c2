"""Plain-text tables for the terminal (no pandas, so `dse eval` stays fast)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: numbers from this size on are shown in 4 significant digits (a latency of 10^300 ms is 300 digits wide
#: in fixed point): hardware figures far outside any real range make the model's numbers that large
BIG = 1e15


def num(v: Any, spec: str) -> str:
    """``v`` in format ``spec`` ('.3f'); '-' for None or NaN; 4 significant digits from :data:`BIG` on
    ('1.811e+152', 'inf')."""
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float) and not abs(v) < BIG:
        return f"{v:.4g}"
    return format(v, spec)


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
        if not a < BIG:
            return f"{v:.4g}"
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
    finite = [v for v in nums if abs(v) < BIG]           # inf and huge values are shown by num
    if all(float(v).is_integer() for v in finite):
        return 0
    small = min(abs(v) for v in finite if v) if any(finite) else 1.0
    return int(min(3, max(0, 2 - math.floor(math.log10(small)))))


def table(rows: list[dict], cols: list[str]) -> str:
    """Left-aligned text, right-aligned numbers in one format per column, one header line."""
    decimals = [column_decimals([r.get(c) for r in rows]) for c in cols]

    def cell(v, d):
        if d is None or v is None or (isinstance(v, float) and not abs(v) < BIG):
            return fmt(v)
        return f"{v:,.{d}f}"
    cells = [[cell(r.get(c), d) for c, d in zip(cols, decimals)] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    numeric = [d is not None for d in decimals]

    def line(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in cells])


def eval_table(r: dict) -> str:
    """The readable form of one `dse eval` result: fit first, then the speculative accounting, then
    the best operating points under an SLA where one was given."""
    body = _design_table(r)
    return body + "\n\n" + sla_table(r) if r.get("sla_points") is not None else body


def sla_table(r: dict) -> str:
    """The best aggregated and disaggregated operating points under the SLA (dse.model.serving)."""
    load = ("random arrivals, concurrency on average" if r.get("arrivals") == "poisson" else
            "closed loop of concurrent clients")
    out = [f"serving under TTFT <= {fmt(r['sla_ttft_target_ms'])} ms and TPOT <= {fmt(r['sla_tpot_target_ms'])} ms "
           f"({load}, prompt {r['prompt_tokens']}, output {r['output_tokens']}, budget "
           f"{r['max_batched_tokens']} tokens an iteration):"]
    rows = [["", "tok/s/chip", "concurrency", "tok/s/user", "TTFT ms", "TPOT ms", "speculation", "prefill chips",
             "USD/Mtok"]]
    for mode, p in r["sla_points"].items():
        name = {"agg": "aggregated", "disagg": "disaggregated"}[mode]
        if not p["met"]:
            rows.append([name, "no point meets the SLA"] + [""] * 7)
            continue
        rows.append([name, fmt(p["tokens_per_s_per_chip"]), str(p["concurrency"]), fmt(p["tokens_per_s_per_user"]),
                     num(p["ttft_ms"], ".1f"), num(p["tpot_ms"], ".2f"), p["speculation"],
                     "-" if p["prefill_share"] is None else f"{p['prefill_share']:.0%}",
                     "-" if p["usd_per_mtok"] is None else num(p["usd_per_mtok"], ".3f")])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out += ["  " + "  ".join(v.ljust(w) if i in (0, 6) else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
            .rstrip() for row in rows]
    if r.get("sizing"):
        for mode, z in r["sizing"].items():
            name = {"agg": "aggregated", "disagg": "disaggregated"}[mode]
            out.append(f"  {name}: {z['chips']} chips ({z['deployments']} deployment{'s' if z['deployments'] > 1 else ''}"
                       f" of {r['sla_points'][mode]['deployment_chips']}) serve {fmt(r['rate_rps'])} requests/s"
                       if z else f"  {name}: cannot meet the SLA")
    won = r.get("sla_serving")
    out.append(f"best: {'aggregated' if won == 'agg' else 'disaggregated'}" if won else
               "no operating point meets the SLA at concurrency 1-1024: loosen --sla-ttft-ms or --sla-tpot-ms")
    return "\n".join(out)


def _design_table(r: dict) -> str:
    ep = f", experts over {r['ep']} EP ranks" if r.get("ep", 1) > 1 else ""
    pp = r.get("pp") or 1
    stages = f" in {pp} pipeline stages of {r['tp']}" if pp > 1 else ""
    out = [f"{r['target']} on {r['chips']}x {r['hw']}{stages}{ep}  ({r['runtime']} runtime, {r['dtype']} weights, "
           f"{r['kv_dtype']} KV; batch {r['batch']}, prompt {r['prompt_tokens']}, output {r['output_tokens']})"]
    if str(r.get("weight_math", "native")).startswith("weight-only"):
        out.append(f"note: {r['weight_math']}")
    dom = r.get("scale_up_domain")
    tp = r.get("tp") or r["chips"]
    if dom and tp > dom:
        out.append(f"note: {tp} chips in tensor parallel are {tp // dom} scale-up domains of {dom}: all-reduces cross "
                   "the scale-out network (hierarchical)")
    elif dom and r["chips"] > dom:
        out.append(f"note: the {pp} stages span {-(-r['chips'] // dom)} scale-up domains of {dom}: a token's hops "
                   "between them cross the scale-out network")
    if r["draft"] != "none":
        group = r["draft_chips"] if r["draft_hw"] else r["chips"]
        # a draft model whose heads do not split its group's chips runs at a smaller tensor parallel
        tp = (f"tensor parallel {r['draft_tp']} of {group} chips, the most its heads allow"
              if r.get("draft_tp") and r["draft_tp"] != group else "")
        where = (f"on {r['draft_chips']}x {r['draft_hw']} (draft chip"
                 f"{', overlapped' if r['overlap'] else ''}{'; ' + tp if tp else ''})" if r["draft_hw"] else
                 f"on the target chips{' (' + tp + ')' if tp else ''}")
        tree = (f", tree of {r['tree_nodes']} nodes (per depth {r['tree_shape'] or '-'}; rank profile "
                f"{r['rank_profile']})" if r.get("tree_nodes") else "")
        acc = r["acceptance"] if r.get("acceptance_origin") in (None, "given") else r["acceptance_origin"]
        task = f"task {r['task']}, T={r['temperature']:g}; " if r.get("acceptance_origin") not in (None, "given") else ""
        if r.get("tree_choices"):       # the method's tree re-chosen for the batch
            what = ("no speculation (no size beats plain decoding)" if not r["k"] else
                    f"tree of {r['tree_nodes']} nodes" if r.get("tree_nodes") else f"chain of {r['k']}")
            shape = f" (per depth {r['tree_shape']}; rank profile {r['rank_profile']})" if r.get("tree_nodes") else ""
            out.append(f"draft {r['draft']} {where}; {task}{acc}; k={r['k']}, {what}{shape}: {r['k_mode']}")
        else:
            out.append(f"draft {r['draft']} {where}; {task}{acc}; k={r['k']} ({r['k_mode']}){tree}")
    out.append("")
    out += memory_lines(r)
    if r.get("datastore_gb"):
        out.append(f"  datastore  {num(r['datastore_gb'], '.2f')} GB in host memory (not device memory)")
    if not r["fits"]:
        out.append("latency      - (the design does not fit; no latency is reported)")
        return "\n".join(out)
    if r["baseline_ms_per_token"] is None or r["spec_ms_per_token"] is None:
        out.append("latency      - (overflows: no finite latency from these hardware figures; check the --set values "
                   "and the device file)")
        return "\n".join(out)
    out.append(f"baseline     {num(r['baseline_ms_per_token'], '.3f')} ms/token  "
               f"{fmt(r['baseline_tokens_per_s'])} tok/s  "
               f"AI {fmt(r['baseline_arithmetic_intensity'])} FLOP/B, {r['baseline_bound']}-bound")
    if r["draft"] == "none":
        out.append(_overhead_line(r, r["baseline_ms_per_token"]))
        out.append(energy_line(r))
        out.append(f"TTFT         {num(r['ttft_ms'], '.2f')} ms   request {num(r['request_latency_ms'], '.1f')} ms")
        return "\n".join(out)
    banded = r.get("speedup_low") is not None and r["speedup_low"] != r["speedup_high"]
    from ..acceptance.fit import BAND_LEVEL
    band = (f"  {100 * BAND_LEVEL:.0f}% band {num(r['speedup_low'], '.3f')}x-{num(r['speedup_high'], '.3f')}x "
            f"({num(r['spec_ms_per_token_high'], '.3f')}-{num(r['spec_ms_per_token_low'], '.3f')} ms/token)"
            if banded else "")
    out.append(f"speculative  {num(r['spec_ms_per_token'], '.3f')} ms/token  {fmt(r['tokens_per_s'])} tok/s  "
               f"speedup {num(r['speedup'], '.3f')}x (bound {num(r['speedup_bound'], '.3f')}x){band}")
    out.append(_overhead_line(r, r["spec_ms_per_token"]))
    out.append(f"iteration    draft {num(r['draft_ms_per_iter'], '.3f')} ms "
               f"(AI {fmt(r['draft_arithmetic_intensity'])}, "
               f"{r['draft_bound']}) + verify {num(r['verify_ms_per_iter'], '.3f')} ms "
               f"(AI {fmt(r['verify_arithmetic_intensity'])}, {r['verify_bound']}) + link "
               f"{num(r['link_ms_per_iter'], '.3f')} ms{_per_iteration(r)} -> {num(r['iter_ms'], '.3f')} ms")
    alpha = num(r["alpha"], ".3f")
    reach = "P(deepest level accepted)" if r.get("tree_nodes") else "P(all k accepted)"
    window = (f"  P(window usable) {num(r['p_window'], '.3f')}" if r.get("overlap") and r.get("p_window") is not None
              else "")
    tband = (f" ({100 * BAND_LEVEL:.0f}% band {num(r['tau_low'], '.3f')}-{num(r['tau_high'], '.3f')})"
             if banded else "")
    out.append(f"accounting   tau {num(r['tau'], '.3f')}{tband} tokens/pass  alpha {alpha}  k {r['k']}  "
               f"c {num(r['draft_cost_ratio'], '.3f')}  {reach} {num(r['p_all_accepted'], '.3f')}{window}")
    out.append(energy_line(r))
    out.append(f"TTFT         {num(r['ttft_ms'], '.2f')} ms   request {num(r['request_latency_ms'], '.1f')} ms")
    if r.get("anchor"):
        a = r["anchor"]
        out.append(f"anchor       baseline set to {num(a['baseline_ms'], '.3f')} ms: scaled {', '.join(a['scaled'])} "
                   f"by {num(a['factor'], '.3f')}")
    return "\n".join(out)


def _per_iteration(r: dict) -> str:
    """' + per iteration X ms': what a serial iteration spends beside its passes and link (the runtime's
    per-iteration kernels and unoverlapped host work, verification sampling: dse.model.spec_iteration);
    empty for overlapped drafting (its draft time is partly hidden) or when it rounds to nothing."""
    parts = (r.get("iter_ms"), r.get("draft_ms_per_iter"), r.get("verify_ms_per_iter"), r.get("link_ms_per_iter"))
    if r.get("overlap") or any(x is None for x in parts):
        return ""
    rest = parts[0] - parts[1] - parts[2] - parts[3]
    return f" + per iteration {num(rest, '.3f')} ms" if rest >= 0.0005 else ""


def _overhead_line(r: dict, per_token_ms: float) -> str:
    """The software stack's share of a token: fixed costs (launches, per-step, per-iteration,
    per-sequence) over the tokens of an iteration."""
    ovh = r["overhead_ms_per_token"]
    share = ovh / per_token_ms if per_token_ms else 0.0
    return (f"overhead     {num(ovh, '.3f')} ms/token ({num(100 * share, '.0f')}%) fixed costs of the "
            f"{r['runtime']} runtime "
            "(kernel launches, layer syncs, per step, per iteration)")


def memory_lines(r: dict) -> list[str]:
    """The capacity check: what the model needs (weights + KV caches) and the runtime's reserve apart,
    against the capacity; for a group of chips, per chip beside the group (state every chip holds whole
    counts once per chip in the group figures), and whether more chips could help."""
    t = r["chips"]
    cap_chip = r["memory_capacity_gb"] / t
    gib = f" ({num(cap_chip * 1e9 / 2 ** 30, '.4g')} GiB)"
    pct = f"{num(100 * r['memory_reserve_gb'] / r['memory_capacity_gb'], '.0f')}%" if r["memory_capacity_gb"] else "-"
    short = r["memory_shortfall_gb"]
    fit = "fits" if not short else "DOES NOT FIT"
    where = f"{gib}" if t == 1 else f" on {t} chips"
    out = [f"memory       {num(r['memory_required_gb'], '.2f')} GB weights + KV + "
           f"{num(r['memory_reserve_gb'], '.2f')} GB runtime "
           f"reserve ({pct}) of {num(r['memory_capacity_gb'], '.2f')} GB{where}   {fit}"]
    if t > 1:
        out.append(f"  per chip   {num(r['chip_memory_required_gb'], '.2f')} GB + "
                   f"{num(r['memory_reserve_gb'] / t, '.2f')} GB reserve of "
                   f"{num(cap_chip, '.2f')} GB{gib}"
                   + (f": short by {num(r['chip_memory_shortfall_gb'], '.2f')} GB a chip "
                      f"({num(short, '.2f')} GB over {t} chips)"
                      if short else ""))
    elif short:
        out[-1] += f": short by {num(short, '.2f')} GB"
    floor = r.get("chip_memory_floor_gb")
    if short and floor is not None and floor + r["memory_reserve_gb"] / t > cap_chip:
        out.append(f"  more chips cannot help: a chip holds at least {num(floor, '.2f')} GB at any chip count "
                   "(replicated weights and KV) + its reserve")
    if r["draft"] != "none" and r["draft_memory_required_gb"]:
        what = "head weights" if str(r["draft"]).startswith(("medusa", "hydra")) else "weights + KV"
        if r.get("draft_hw"):
            short_d = r.get("draft_memory_shortfall_gb") or 0.0
            out.append(f"  draft      {num(r['draft_memory_required_gb'], '.2f')} GB ({what}) + "
                       f"{num(r['draft_memory_reserve_gb'], '.2f')} GB reserve on a device of "
                       f"{num(r['draft_memory_capacity_gb'], '.2f')} GB"
                       + (f"   DRAFT CHIP DOES NOT FIT: short by {num(short_d, '.2f')} GB" if short_d else ""))
        else:
            out.append(f"  draft      {num(r['draft_memory_required_gb'], '.2f')} GB of that ({what}), "
                       "on the target chips")
    return out


def energy_line(r: dict) -> str:
    """Energy per generated token (speculative, and the baseline's when speculating), tokens per joule,
    and the mean power it implies, every chip of the design's (a draft chip's too): continuous batching
    energy per token x tokens/s, static batching the B x G tokens of a request (its prompts' prefill
    included) over its TTFT and G tokens' time; beside its power limit, power_limit_w (the vendor TDP where known, else
    the provisioned power_w), which it never exceeds (at it, the line says so)."""
    e = r.get("energy_j_per_token")
    if e is None:
        return (f"energy       - (no energy model for {r['hw']}: its process node or memory type is outside "
                "hardware_db/technology)")
    base = (f" (baseline {num(r['baseline_energy_j_per_token'], '#.3g')} J/token)"
            if r["draft"] != "none" and r.get("baseline_energy_j_per_token") is not None else "")
    if r.get("batching") == "static" and r.get("request_latency_ms"):
        # a request: TTFT (its prefill) + G tokens at spec_ms_per_token (request_latency_ms counts G - 1)
        draw = e * r["batch"] * r["output_tokens"] / ((r["request_latency_ms"] + r["spec_ms_per_token"]) * 1e-3)
    else:
        draw = e * r["tokens_per_s"]
    cap = ""
    limit_w = r.get("power_limit_w")
    if limit_w is not None:
        # no chip draws more than its limit (model/latency.energy_metrics): say when it is there
        at = " (at its power limit: a real chip would lower its clocks)" if draw >= limit_w * (1 - 1e-9) else ""
        what = "TDP" if r.get("tdp_w") is not None and abs(r["tdp_w"] - limit_w) <= 1e-9 * limit_w else "limit"
        cap = f" of its {fmt(limit_w)} W {what}{at}"
    return (f"energy       {num(e, '#.3g')} J/token  {num(r['tokens_per_j'], '#.3g')} tokens/J{base}; "
            f"draws {fmt(draw)} W{cap}")


def short_name(column: str) -> str:
    """params_target_chip_memory -> memory, params_draft_chip_memory -> draft.memory."""
    return column.removeprefix("params_").replace("target_chip_", "").replace("draft_chip_", "draft.")


#: the width a table is fitted to when the terminal's is unknown (output to a file or a pipe)
DEFAULT_WIDTH = 120
#: the narrowest width a table is fitted to
MIN_WIDTH = 80


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` when set), at least :data:`MIN_WIDTH`; :data:`DEFAULT_WIDTH`
    when the output is not a terminal."""
    import shutil
    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def front_text(columns: Mapping[str, list], width: int | None = None) -> str:
    """A front table (column name -> values) as text, every column right-aligned under its short
    name: floats to 4 significant digits (whole from 10^4), integers whole; a null or NaN (a knob
    that does not act on the design, dse.study.space) shows as '-'. When one header line would
    be wider than ``width``, each header is broken at its underscores over up to 3 lines, no
    wider than its column's values where that is possible."""
    cells = {c: [_front_cell(v) for v in vals] for c, vals in columns.items()}
    names = [short_name(c) for c in cells]
    value_w = [max([0] + [len(v) for v in vals]) for vals in cells.values()]
    heads = [[n] for n in names]
    if width is not None and _table_width(heads, value_w) > width:
        heads = [_header_lines(n, w) for n, w in zip(names, value_w)]
    widths = [max([w] + [len(h) for h in hl]) for hl, w in zip(heads, value_w)]
    depth = max((len(h) for h in heads), default=1)
    head_rows = [[(hl[i - (depth - len(hl))] if i >= depth - len(hl) else "") for hl in heads] for i in range(depth)]
    rows = head_rows + [list(r) for r in zip(*cells.values())]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths)).rstrip() for r in rows)


def _table_width(heads: list[list[str]], value_w: list[int]) -> int:
    return sum(max([w] + [len(h) for h in hl]) for hl, w in zip(heads, value_w)) + 2 * max(0, len(heads) - 1)


def _header_lines(name: str, value_width: int, max_lines: int = 3) -> list[str]:
    """``name`` broken after '.' and at '_' into at most ``max_lines`` lines: the narrowest
    breaking (never narrower than ``value_width``), or one with fewer lines at most 3 characters
    wider: spec_ms_per_token at 5 -> spec_ms / per_token.

    >>> _header_lines("spec_ms_per_token", 5), _header_lines("draft.link_bw_gb_s", 5)
    (['spec_ms', 'per_token'], ['draft.link', 'bw_gb_s'])
    >>> _header_lines("tree_shape", 16)
    ['tree_shape']
    """
    import re
    tokens = [t for t in re.split(r"(?<=\.)|_", name) if t]
    best: dict[int, list[str]] = {}           # lines -> the narrowest breaking into that many
    if value_width >= len(name):               # the values are wider than the whole name: one line
        return [name]
    for w in range(max(value_width, max(len(t) for t in tokens)), len(name) + 1):
        lines: list[str] = []
        for t in tokens:
            joined = lines[-1] + ("" if lines[-1].endswith(".") else "_") + t if lines else t
            if lines and len(joined) <= w:
                lines[-1] = joined
            else:
                lines.append(t)
        if len(lines) <= max_lines:
            best.setdefault(len(lines), lines)
    narrowest = min(max(len(x) for x in b) for b in best.values())
    return next(best[n] for n in sorted(best) if max(len(x) for x in best[n]) <= narrowest + 3)


def front_block(columns: Mapping[str, list], objectives: list[str], width: int | None = None,
                wide: bool = False) -> str:
    """The front table ``dse run`` and ``dse pareto`` print: with ``wide``, every column; else the
    objectives, ``trial`` and the columns whose values differ between the rows shown (a knob that
    is the same in every row is named once below the table), the speculative accounting (tau, k,
    c, alpha) only beside a speedup objective, and, when that is still wider than ``width``, the
    last columns left out and named."""
    cols = dict(columns)
    notes = []
    if not wide:
        speedup = any("speedup" in o for o in objectives)
        spec = ("alpha", "tau", "k", "draft_cost_ratio", "speedup", "speedup_bound")

        def varies(vals):
            return len({_front_cell(v) for v in vals}) > 1
        shown = [c for c in cols if c not in objectives and c != "trial" and
                 (c.startswith("params_") or c in ("k", "tree_shape") or (speedup and c in spec))]
        same = {c: cols[c][0] for c in shown if cols[c] and not varies(cols[c])}
        keep = [c for c in cols if c in objectives or c == "trial" or (c in shown and c not in same)]
        cols = {c: cols[c] for c in keep}
        if same:
            notes.append("same in every row: " + ", ".join(f"{short_name(c)} {_front_cell(v)}" for c, v in same.items()))
    dropped: list[str] = []
    if width is not None:
        while len(cols) > len(objectives) + 1 and _too_wide(cols, width):
            last = next(c for c in reversed(list(cols)) if c not in objectives)
            dropped.insert(0, last)
            del cols[last]
    if dropped:
        notes.append(f"not shown to fit {width} columns: {', '.join(short_name(c) for c in dropped)} "
                     "(--wide shows every column)")
    text = front_text(cols, width)
    return "\n".join([text] + [wrap(n, width) for n in notes])


def _too_wide(cols: Mapping[str, list], width: int) -> bool:
    return max(len(line) for line in front_text(cols, width).splitlines()) > width


def wrap(text: str, width: int | None) -> str:
    """``text`` wrapped to ``width`` (continuation lines indented two spaces); as is without one."""
    if width is None:
        return text
    import textwrap
    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False))


def counts_line(front: int, feasible: int, designs: int, rows: int, rows_noun: str = "trials") -> str:
    """The counts every front header gives, in one vocabulary (dse.results.analysis.counts): 'front: 263
    designs of 988 feasible (1,715 designs in 2,000 trials)'; designs are distinct designs, the
    front's a design per point."""
    def n(k: int, noun: str) -> str:
        return f"{k:,} {noun}{'' if k == 1 else 's'}"
    return f"front: {n(front, 'design')} of {feasible:,} feasible ({n(designs, 'design')} in {rows:,} {rows_noun})"


def epsilon_note(shown: int, points: int, epsilon) -> str:
    """'; 41 at epsilon 1% (near-ties collapsed; --epsilon 0: all)': of the front's points, those left
    when a design within epsilon (relative) of a row shown in every objective is left out."""
    eps = [float(e) for e in epsilon]
    if not any(eps):
        return ""
    pct = (f"{eps[0] * 100:g}%" if len(set(eps)) == 1 else
           "(" + ", ".join(f"{e * 100:g}%" for e in eps) + ")")
    return f"; {shown:,} at epsilon {pct} (near-ties collapsed; --epsilon 0: all)"


def _front_cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, str) and v.endswith((".yaml", ".yml")) and "/" in v:
        return v.rsplit("/", 1)[1]            # a device file (its full path is in the results)
    if isinstance(v, float):
        return f"{v:.0f}" if 1e4 <= abs(v) < 1e15 else f"{v:.4g}"
    return str(v)
