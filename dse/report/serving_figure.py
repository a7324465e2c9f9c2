"""The serving figure of a study with an SLA: output tokens/s per chip against tokens/s per user
(1 / TPOT) over concurrency, for a few designs of the front.

Each design is rebuilt from its row's knobs (dse.evaluation.designs.build_designs) and served in one
pool at every concurrency (dse.model.serving.aggregated_points, all the designs in one call per
drafter): with speculation (its draft, or the study's where it drafts none; k auto, so k = 0 where
drafting does not pay) and without (drafter none). The SLA is the shaded region x >= 1 / TPOT
target; a point whose TTFT misses its target is hollow; the star is the design's chosen operating
point (its sla_* columns: aggregated or disaggregated, whichever serves more per chip).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..evaluation.designs import build_designs
from ..model.evaluate import evaluate
from ..model.serving import aggregated_points
from ..study import StudySpec, open_study
from ..workload.spec import DrafterSpec, Sla, Workload
from .figures import GREY, MARKERS, OKABE_ITO, auto_log, new_figure, suptitle
from .rows import design_label, row_params

__all__ = ["ServingCurve", "ServingData", "serving_data", "figure_serving", "serving_caption", "TOP"]

#: designs of the front drawn, spread along the first objective
TOP = 6


@dataclass(frozen=True)
class ServingCurve:
    """One design: its points over concurrency with and without speculation ((C,) arrays: tokens/s
    per user and per chip, TTFT met, fits) and its chosen operating point."""

    label: str
    drafter: str                # the drafter of the 'on' curve; '' when the study has none
    on: dict | None
    off: dict
    star: tuple                 # (tokens/s per user, tokens/s per chip, 'agg' | 'disagg', concurrency)


@dataclass(frozen=True)
class ServingData:
    sla: Sla
    curves: list
    first_objective: str


def _plain(w: Workload) -> Workload:
    """The workload without speculation (drafter none, no tree)."""
    return dataclasses.replace(w, drafter=DrafterSpec(kind="none", label="none"), tree_nodes=0, tree_choices=(),
                               acceptance_source="none")


def _on_drafters(study: StudySpec, rows: pd.DataFrame) -> list[tuple[str, int]]:
    """Per row, the (draft, exit layer) its speculating curve uses: its own draft, else the study's
    first that drafts; ('', 0) where the study has none."""
    kinds = {lab: study.drafts.kind(lab) for lab in study.drafts.labels}
    first = next((lab for lab, kind in kinds.items() if kind != "none"), "")
    layers = rows["params_draft_exit_layer"] if "params_draft_exit_layer" in rows.columns else None
    lo = study.drafts.exit_range[0] if study.drafts.exit_range else 0
    out = []
    for i in range(len(rows)):
        own = str(rows["params_draft"].iloc[i]) if "params_draft" in rows.columns else study.drafter.label
        lab = own if kinds.get(own, "none") != "none" else first
        layer = layers.iloc[i] if layers is not None and lab == "early-exit" else lo
        out.append((lab, int(layer) if pd.notna(layer) else lo))
    return out


#: designs nearer each other than this (a share of the front's span, over the objectives) are drawn once
MIN_SPREAD = 0.2


def _picks(study: StudySpec, front: pd.DataFrame, top: int) -> pd.DataFrame:
    """Up to ``top`` front rows that meet the SLA, spread over the front: the best by the first
    objective, then again and again the row farthest from those chosen (objectives scaled to the
    front's span, on logs where positive), until ``top`` or none is MIN_SPREAD away."""
    v = pd.to_numeric(front["sla_tokens_per_s_per_chip"], errors="coerce")
    ok = front[v.notna().to_numpy()]
    o = study.objectives[0]
    ok = ok.sort_values(o.metric, ascending=o.direction == "minimize", kind="stable")
    vals = ok[[ob.metric for ob in study.objectives]].apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    keep = np.isfinite(vals).all(axis=1)
    ok, vals = ok[keep], vals[keep]
    if len(ok) <= 1:
        return ok
    with np.errstate(divide="ignore", invalid="ignore"):
        vals = np.where((vals > 0).all(axis=0), np.log(np.where(vals > 0, vals, 1.0)), vals)
        span = vals.max(axis=0) - vals.min(axis=0)
        z = np.where(span > 0, (vals - vals.min(axis=0)) / np.where(span > 0, span, 1.0), 0.0)
    chosen = [0]
    far = np.linalg.norm(z - z[0], axis=1)
    while len(chosen) < top and far.max() >= MIN_SPREAD:
        i = int(np.argmax(far))
        chosen.append(i)
        far = np.minimum(far, np.linalg.norm(z - z[i], axis=1))
    return ok.iloc[sorted(chosen)]


def serving_data(study: StudySpec, front: pd.DataFrame, top: int = TOP) -> ServingData | None:
    """The figure's curves for up to ``top`` front designs; None without an SLA or a front design
    that meets it."""
    sla = study.workload.sla
    if sla is None or not len(front) or "sla_tokens_per_s_per_chip" not in front.columns:
        return None
    rows = _picks(study, front, top)
    if not len(rows):
        return None
    _, db, tech = open_study(study)
    batch = build_designs(study, row_params(study, rows), len(rows), db, tech).batch
    base = study.workload

    def points(pts):
        return dict(x=pts["tokens_per_s_per_user"], y=pts["tokens_per_s_per_chip"],
                    ttft_ok=pts["ttft_s"] <= sla.ttft_s, fits=pts["fits"] & np.isfinite(pts["tokens_per_s_per_chip"]))

    off = points(aggregated_points(batch, _plain(base), evaluate))
    drafters = _on_drafters(study, rows)
    on: dict[int, dict] = {}
    for key in dict.fromkeys(d for d in drafters if d[0]):        # one call per drafter, not per design
        idx = np.flatnonzero([d == key for d in drafters])
        pts = points(aggregated_points(batch.take(idx), study.drafts.workload(*key), evaluate))
        on.update({int(i): {k: v[j] for k, v in pts.items()} for j, i in enumerate(idx)})
    curves = []
    for i, (_, r) in enumerate(rows.iterrows()):
        star = (float(r["sla_tokens_per_s_per_user"]), float(r["sla_tokens_per_s_per_chip"]),
                str(r.get("sla_serving", "")), r.get("sla_concurrency"))
        curves.append(ServingCurve(design_label(r), drafters[i][0], on.get(i),
                                   {k: v[i] for k, v in off.items()}, star))
    return ServingData(sla, curves, study.objectives[0].metric)


def _draw_curve(ax, pts: dict, colour: str, marker: str, ls: str, ms: float) -> None:
    m = pts["fits"]
    x, y, ok = pts["x"][m], pts["y"][m], pts["ttft_ok"][m]
    ax.plot(x, y, ls=ls, lw=1.4 if ls == "-" else 1.1, color=colour, zorder=3)
    ax.plot(x[ok], y[ok], ls="none", marker=marker, ms=ms, color=colour, mec=colour, zorder=4)
    ax.plot(x[~ok], y[~ok], ls="none", marker=marker, ms=ms, mfc="white", mec=colour, mew=1.0, zorder=4)


def figure_serving(d: ServingData, title: str):
    """One panel: each design's curves (colour and marker its own, solid with speculation, dashed
    without), the SLA region shaded, hollow points missing the TTFT target, stars at the chosen
    points; one legend below the axes."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = new_figure(7.4, 6.4)
    ax = fig.add_subplot()
    xs, ys = [], []
    for n, c in enumerate(d.curves):
        colour, marker = OKABE_ITO[n % len(OKABE_ITO)], MARKERS[n % len(MARKERS)]
        for pts, ls, ms in ((c.on, "-", 5.0), (c.off, "--", 3.5)):
            if pts is not None:
                _draw_curve(ax, pts, colour, marker, ls, ms)
                xs.append(pts["x"][pts["fits"]])
                ys.append(pts["y"][pts["fits"]])
        ax.plot([c.star[0]], [c.star[1]], ls="none", marker="*", ms=15, color=colour, mec="black", mew=0.9,
                zorder=6 + len(d.curves) - n)                   # the first design's star on top
        xs.append(np.array([c.star[0]]))
        ys.append(np.array([c.star[1]]))
    auto_log(ax, "x", *xs)
    auto_log(ax, "y", *ys)
    ax.autoscale_view()
    x0, x1 = ax.get_xlim()
    edge = 1.0 / d.sla.tpot_s
    ax.axvspan(max(edge, x0), max(edge, x1), color=OKABE_ITO[2], alpha=0.10, lw=0, zorder=1)
    ax.axvline(edge, color=OKABE_ITO[2], lw=1.0, zorder=2)
    ax.set_xlim(x0, x1)
    ax.set_xlabel("output tokens/s per user (1 / TPOT), higher is better")
    ax.set_ylabel("output tokens/s per chip, higher is better")
    ax.grid(True, lw=0.4, alpha=0.5)
    ttft, tpot = f"{d.sla.ttft_s * 1e3:g}", f"{d.sla.tpot_s * 1e3:g}"
    drafter = next((c.drafter for c in d.curves if c.on is not None), "")
    handles = [Line2D([], [], color=OKABE_ITO[n % len(OKABE_ITO)], marker=MARKERS[n % len(MARKERS)], ms=5, lw=1.4,
                      label=c.label) for n, c in enumerate(d.curves)]
    keys = ([Line2D([], [], color="black", lw=1.4, label=f"speculation on ({drafter}, k auto: 0 where it does not pay)")]
            if drafter else [])
    keys += [Line2D([], [], color="black", lw=1.1, ls="--", label="speculation off (no drafter)"),
             Line2D([], [], ls="none", marker="o", ms=5, color="black", label=f"TTFT <= {ttft} ms"),
             Line2D([], [], ls="none", marker="o", ms=5, mfc="white", mec="black", label=f"TTFT > {ttft} ms"),
             Patch(facecolor=OKABE_ITO[2], alpha=0.25, label=f"SLA: TPOT <= {tpot} ms (>= {edge:.3g} tokens/s "
                   "per user), TTFT met"),
             Line2D([], [], ls="none", marker="*", ms=12, color=GREY, mec="black", label="chosen operating point")]
    fig.legend(handles=handles + keys, loc="outside lower center", ncols=2, fontsize=7, frameon=False)
    suptitle(fig, "Serving under the SLA: throughput per chip against speed per user, over concurrency", title)
    return fig


def serving_caption(d: ServingData) -> str:
    """What the figure shows, for the page."""
    stars = "; ".join(f"{c.label}: {c.star[1]:,.0f} tokens/s per chip at {c.star[0]:.3g} tokens/s per user, "
                      f"{'disaggregated' if c.star[2] == 'disagg' else 'one pool'}"
                      + (f", concurrency {int(c.star[3])}" if c.star[3] is not None and pd.notna(c.star[3]) else "")
                      for c in d.curves)
    return (f"Up to {TOP} designs of the front (spread along {d.first_objective}), each served in one pool with "
            "continuous batching and chunked prefill at concurrency 1 to 1,024 (a closed loop of that many clients; "
            "a point per concurrency, further right is fewer requests in flight), with speculation (solid) and "
            "without (dashed). Hollow points miss the TTFT target; the shaded region meets the TPOT target. The "
            "star is the design's best point under the SLA (its sla_* columns; a disaggregated deployment's star "
            f"sits off the one-pool curves): {stars}.")
