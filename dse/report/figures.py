"""The report's figures: what each shows and how it is drawn.

The ``*_data`` functions compute what a figure shows (fronts, samples, draft groups, hypervolume
curves), None when the results do not support the figure (``why_no_draft_figure`` and
``why_no_history_figure`` say why, for the page); the ``figure_*`` functions only draw it and
return a matplotlib ``Figure``. Plots use the Okabe-Ito
colour-blind-safe palette plus a distinct marker shape per series, so they also read in greyscale.

matplotlib is imported inside the drawing functions (MPLBACKEND set aside, dse.process.matplotlib_env)
and drives the Agg canvas directly (no pyplot, no GUI, no global backend switch). :mod:`.page` decides which figures a report gets,
saves them and writes ``index.html``.
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import DseError
from ..process.matplotlib_env import import_matplotlib
from ..results import analysis as da
from ..results import pareto
from .labels import axis_label, known_part_name_column, short_knob, tick_text, unit_of, value_text

__all__ = ["OKABE_ITO", "MARKERS", "GREY", "DPI", "MAX_SCATTER", "DRAFT_COLUMN", "DRAFT_KNOB", "CLASS_COLUMNS",
           "PairData", "DraftData", "CodesignData", "pairs_data", "draft_data", "codesign_data", "history_data",
           "why_no_draft_figure", "why_no_history_figure", "figure_style", "figure_fronts", "figure_speedup",
           "figure_draft", "figure_codesign", "figure_importance", "figure_history", "place_labels", "LOG_RATIO",
           "new_figure", "suptitle", "auto_log"]

#: Okabe & Ito (2008) colour-blind-safe palette, in plotting order.
OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
             "#000000"]
#: Marker shapes cycled alongside the colours, so series differ in greyscale too.
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
GREY = "#9a9a9a"
DPI = 150
MAX_SCATTER = 20_000          # background points drawn per series (random sample beyond)
DRAFT_COLUMN = "params_draft_chip_enabled"

# --------------------------------------------------------------------------- figure data

def _sample(xy: np.ndarray, limit: int, seed: int = 0) -> np.ndarray:
    if xy.shape[0] <= limit:
        return xy
    idx = np.sort(np.random.default_rng(seed).choice(xy.shape[0], limit, replace=False))
    return xy[idx]


def _step_order(xy: np.ndarray) -> np.ndarray:
    return xy[np.lexsort((xy[:, 1], xy[:, 0]))] if xy.size else xy


@dataclass(frozen=True)
class PairData:
    """What one objective-pair panel shows."""

    x: str
    y: str
    dx: str
    dy: str
    feasible: np.ndarray        # (n, 2) feasible points not on the front (sampled)
    infeasible: np.ndarray      # (n, 2) infeasible points with finite x, y (sampled)
    front: np.ndarray           # (n, 2) rows on the all-objective front, sorted by x
    pair_front: np.ndarray      # (n, 2) 2-D front of this pair, sorted by x
    n_feasible: int
    n_infeasible: int
    known: list = field(default_factory=list)   # [(label, x, y)]
    all_objectives: bool = True  # front == pair_front (exactly two objectives)


def _known_points(known: pd.DataFrame | None, x: str, y: str) -> list:
    if known is None or x not in known.columns or y not in known.columns:
        return []
    lab = known_part_name_column(known)
    out = []
    for i, (xv, yv) in enumerate(zip(known[x], known[y], strict=True)):
        if pd.notna(xv) and pd.notna(yv):
            out.append((str(known[lab].iloc[i]) if lab else str(known.index[i]),
                        float(xv), float(yv)))
    return out


def pairs_data(df, objs, known=None) -> list[PairData]:
    """One PairData per pair of objectives (the all-objective front is computed once)."""
    vals, ok = da.usable_values(df, objs)
    dirs = da.directions(objs)
    new = da.new_design_mask(df)            # counts are of distinct designs (dse.results.analysis.counts)
    # one point per design of the front: repeats and exact ties are drawn and counted once
    on_front = pareto.first_of_equal(vals, pareto.pareto_mask(vals, dirs, feasible=ok))
    out = []
    for i, j in itertools.combinations(range(len(objs)), 2):
        xy = vals[:, [i, j]]
        pair = on_front if len(objs) == 2 else pareto.first_of_equal(
            xy, pareto.pareto_mask(xy, [dirs[i], dirs[j]], feasible=ok))
        bad = ~ok & np.isfinite(xy).all(axis=1)
        out.append(PairData(
            x=objs[i][0], y=objs[j][0], dx=dirs[i], dy=dirs[j],
            feasible=_sample(xy[ok & ~on_front], MAX_SCATTER),
            infeasible=_sample(xy[bad], MAX_SCATTER, seed=1),
            front=_step_order(xy[on_front]), pair_front=_step_order(xy[pair]),
            n_feasible=int((da.feasible_mask(df) & new).sum()), n_infeasible=int((~da.feasible_mask(df) & new).sum()),
            known=_known_points(known, objs[i][0], objs[j][0]), all_objectives=len(objs) == 2))
    return out


def _draft_groups(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """(with, without) masks for the draft-chip knob, or None if it lacks both values."""
    if DRAFT_COLUMN not in df.columns:
        return None
    col = df[DRAFT_COLUMN]
    if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
        num = col.astype("Float64")
        on = (num != 0).fillna(False).to_numpy(dtype=bool)
        off = (num == 0).fillna(False).to_numpy(dtype=bool)
    else:
        s = col.astype("str").str.strip().str.lower()
        on = s.isin(["true", "1", "yes", "on"]).to_numpy(dtype=bool)
        off = s.isin(["false", "0", "no", "off"]).to_numpy(dtype=bool)
    return (on, off) if on.any() and off.any() else None


@dataclass(frozen=True)
class DraftData:
    x: str
    y: str
    dx: str
    dy: str
    groups: list        # [(label, sampled feasible (n,2), pair front (n,2), hv, front size)]
    reference: dict
    n_objectives: int


def draft_data(df, objs) -> DraftData | None:
    masks = _draft_groups(df)
    if masks is None or len(objs) < 2:
        return None
    on, off = (df[m] for m in masks)
    try:
        cmp = da.compare_fronts(on, off, objs)
    except DseError:  # neither group has a feasible design
        return None
    dirs = da.directions(objs)
    groups = []
    for label, part, hv, size in (("with draft chip", on, cmp["hv_a"], cmp["front_size_a"]),
                                  ("no draft chip", off, cmp["hv_b"], cmp["front_size_b"])):
        vals, ok = da.usable_values(part, objs)
        xy = vals[:, :2]
        pf = pareto.pareto_mask(xy, dirs[:2], feasible=ok)
        groups.append((label, _sample(xy[ok], MAX_SCATTER), _step_order(xy[pf]), hv, size))
    return DraftData(objs[0][0], objs[1][0], dirs[0], dirs[1], groups, cmp["reference"],
                     len(objs))


def why_no_draft_figure(df: pd.DataFrame, objs) -> str:
    """Why the draft-chip figure is not drawn."""
    if len(objs) < 2:
        return "one objective"
    if DRAFT_COLUMN not in df.columns:
        return "the study has no draft chip to compare (space.draft_chip.enabled is not searched)"
    if _draft_groups(df) is None:
        return "every design has the draft chip on, or every design has it off"
    return "neither the designs with a draft chip nor those without have a feasible design"


#: the draft knob (a study whose workload.draft is a list) and the columns that class a chip
DRAFT_KNOB = "params_draft"
CLASS_COLUMNS = ("params_target_chip_memory", "params_target_chip_device")


@dataclass(frozen=True)
class CodesignData:
    """The front coloured by draft, and the winning draft per chip class and batch."""

    x: str
    y: str
    dx: str
    dy: str
    drafts: list                # [(draft, feasible sample (n,2), front points (m,2))]
    classes: list               # chip classes (rows of the table)
    batches: list               # batch sizes (columns)
    winner: dict                # (class, batch) -> (draft, best value of the first objective, its speedup)
    class_label: str


def _draft_label(df: pd.DataFrame) -> pd.Series:
    """params_draft, with the early-exit range's layer: 'early-exit:24'."""
    d = df[DRAFT_KNOB].astype("string")
    if "params_draft_exit_layer" in df.columns:
        layer = df["params_draft_exit_layer"].astype("Int64").astype("string")
        d = d.where(~(d == "early-exit").fillna(False), "early-exit:" + layer.fillna("?"))
    return d.fillna("-")


def codesign_data(df, objs) -> CodesignData | None:
    """None unless the draft is a knob. The winner of a (chip class, batch) cell is the draft of
    its feasible design best on the first objective; the class is the target's memory (or known
    part), with or without a draft chip."""
    if DRAFT_KNOB not in df.columns or len(objs) < 2:
        return None
    vals, ok = da.usable_values(df, objs)
    if not ok.any():
        return None
    dirs = da.directions(objs)
    label = _draft_label(df).to_numpy(dtype=object)
    kind = np.array([str(x).split(":")[0] for x in label], dtype=object)
    # a drafting design whose best k is 0 does not speculate: drawn as `none`, its cell says "(off)"
    k0 = (df["k"].to_numpy(dtype=float, na_value=np.nan) == 0) if "k" in df.columns else np.zeros(len(df), bool)
    label = np.where(k0 & (kind != "none"), np.array([f"{x} (off)" for x in label], dtype=object), label)
    kind = np.where(k0, "none", kind)
    front = pareto.pareto_mask(vals[:, :2], dirs[:2], feasible=ok)
    drafts = []
    for d in dict.fromkeys(kind[ok]):
        m = kind == d
        drafts.append((d, _sample(vals[ok & m & ~front][:, :2], MAX_SCATTER), _step_order(vals[front & m][:, :2])))
    col = next((c for c in CLASS_COLUMNS if c in df.columns), None)
    cls = df[col].astype("string").fillna("-").to_numpy(dtype=object) if col else np.full(len(df), "all", object)
    if DRAFT_COLUMN in df.columns:
        chip = df[DRAFT_COLUMN].astype("boolean").fillna(False).to_numpy(dtype=bool)
        cls = np.array([f"{c} + draft chip" if on else str(c) for c, on in zip(cls, chip)], dtype=object)
    batch = df["params_batch"].to_numpy() if "params_batch" in df.columns else np.full(len(df), "-", object)
    sign = 1.0 if dirs[0] == "minimize" else -1.0
    winner = {}
    speed = df["speedup"].to_numpy(dtype=float, na_value=np.nan) if "speedup" in df.columns else np.full(len(df), np.nan)
    for c in sorted(set(cls[ok])):
        for b in sorted(set(batch[ok]), key=lambda v: (str(type(v)), v)):
            m = ok & (cls == c) & (batch == b)
            if m.any():
                i = np.flatnonzero(m)[np.argmin(sign * vals[m, 0])]
                winner[(c, b)] = (label[i], float(vals[i, 0]), float(speed[i]))
    return CodesignData(objs[0][0], objs[1][0], dirs[0], dirs[1], drafts, sorted(set(cls[ok])),
                        sorted(set(batch[ok]), key=lambda v: (str(type(v)), v)), winner,
                        (short_knob(col) if col else "chip") + (" (+ draft chip)" if DRAFT_COLUMN in df.columns else ""))


def figure_codesign(d: CodesignData, title: str):
    from matplotlib.patches import Rectangle

    fig = new_figure(12.0, 5.8)
    ax, tab = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    colour = {name: (OKABE_ITO[i % len(OKABE_ITO)], MARKERS[i % len(MARKERS)]) for i, (name, _, _) in enumerate(d.drafts)}
    for name, pts, pf in d.drafts:
        c, mk = colour[name]
        if pts.size:
            ax.scatter(pts[:, 0], pts[:, 1], s=5, c=c, marker=mk, alpha=0.12, linewidths=0, rasterized=True)
        if pf.size:
            ax.plot(pf[:, 0], pf[:, 1], ls="none", marker=mk, ms=6, color=c, markeredgecolor="black", mew=0.4,
                    label=f"{name} ({len(pf)} on the front)")
        else:
            ax.plot([], [], ls="none", marker=mk, color=c, label=f"{name} (none on the front)")
    allpts = [p[:, 0] for _, p, f in d.drafts if p.size] + [f[:, 0] for _, _, f in d.drafts if f.size]
    auto_log(ax, "x", *allpts)
    auto_log(ax, "y", *([p[:, 1] for _, p, f in d.drafts if p.size] + [f[:, 1] for _, _, f in d.drafts if f.size]))
    ax.set_xlabel(f"{axis_label(d.x)}, {_arrow(d.dx)}")
    ax.set_ylabel(f"{axis_label(d.y)}, {_arrow(d.dy)}")
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(fontsize=7, title="draft (front points outlined; a design whose best k is 0 counts as none)",
              title_fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, frameon=False)
    ax.set_title("The front by draft", fontsize=9)
    # the winners: one cell per (chip class, batch), coloured by the winning draft's kind
    nr, nc = len(d.classes), len(d.batches)
    for i, c in enumerate(d.classes):
        for j, b in enumerate(d.batches):
            w = d.winner.get((c, b))
            if w is None:
                tab.add_patch(Rectangle(
                    (j, nr - 1 - i), 1, 1, facecolor="white", edgecolor=GREY, lw=0.5))
                tab.text(j + 0.5, nr - 0.5 - i, "-", ha="center", va="center", fontsize=7, color=GREY)
                continue
            name, val, sp = w
            col = colour.get(str(name).split(":")[0], (GREY, "o"))[0]
            tab.add_patch(Rectangle(
                (j, nr - 1 - i), 1, 1, facecolor=col, alpha=0.35, edgecolor="white", lw=1.0))
            sp_text = f"\n{sp:.2f}x" if sp == sp else ""
            tab.text(j + 0.5, nr - 0.5 - i, f"{name}\n{value_text(val)} {unit_of(d.x)}{sp_text}", ha="center",
                     va="center", fontsize=6.5)
    tab.set_xlim(0, nc)
    tab.set_ylim(0, nr)
    tab.set_xticks([j + 0.5 for j in range(nc)], [str(b) for b in d.batches], fontsize=7)
    tab.set_yticks([nr - 0.5 - i for i in range(nr)], list(d.classes), fontsize=7)
    tab.set_xlabel("batch (sequences decoded together)")
    tab.set_ylabel(d.class_label)
    tab.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        tab.spines[side].set_visible(False)
    tab.set_title(f"Best draft per chip class and batch (lowest {unit_of(d.x)}; its speedup)", fontsize=9)
    suptitle(fig, "Which draft wins where", title)
    return fig


def history_data(df, objs) -> list[tuple[str, pd.DataFrame]] | None:
    """[(label, hypervolume_history)], one curve per sampler when several share the file."""
    if "trial" not in df.columns or not da.usable_values(df, objs)[1].any():
        return None
    if "sampler" in df.columns and df["sampler"].eq("grid").all():   # a sweep: no trial order
        return None
    ref = da.hypervolume_reference(df, objs)
    if "sampler" in df.columns and df["sampler"].nunique(dropna=True) > 1:
        return [(str(name), da.hypervolume_history(g, objs, reference=ref))
                for name, g in df.groupby("sampler", sort=True) if len(g)]
    return [("all designs", da.hypervolume_history(df, objs, reference=ref))]


def why_no_history_figure(df: pd.DataFrame, objs) -> str:
    """Why the hypervolume-against-trial figure is not drawn."""
    if (df.attrs.get("dse") or {}).get("sampler") == "grid" or ("sampler" in df.columns and df["sampler"].eq("grid").all()):
        return "a sweep's grid points have no trial order (dse sweep evaluates the grid, it does not search)"
    if "trial" not in df.columns:
        return "the results have no trial column"
    return "no feasible design"


# --------------------------------------------------------------------------- drawing

def figure_style():
    """The matplotlib settings every figure is drawn and saved with (palette, font sizes, dpi)."""
    matplotlib = import_matplotlib()
    from matplotlib import cycler

    return matplotlib.rc_context({
        "axes.prop_cycle": cycler(color=OKABE_ITO), "font.size": 8, "axes.titlesize": 9,
        "axes.labelsize": 8, "savefig.dpi": DPI, "figure.dpi": DPI})


def new_figure(w: float, h: float):
    import_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def suptitle(fig, what: str, title: str) -> None:
    """``what`` on the first line, the workload below, wrapped to the figure width."""
    width = max(40, int(fig.get_figwidth() * 12))
    lines = [textwrap.fill(line, width) for line in f"{what}\n{title}".split("\n")]
    fig.suptitle("\n".join(lines), fontsize=9)


#: a positive axis spanning more than this ratio is drawn on a log scale
LOG_RATIO = 10.0


def auto_log(ax, which: str, *arrays) -> None:
    vals = np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays if np.size(a)]
                          or [np.empty(0)])
    vals = vals[np.isfinite(vals)]
    if vals.size and vals.min() > 0 and vals.max() / vals.min() > LOG_RATIO:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        axis = ax.xaxis if which == "x" else ax.yaxis
        axis.set_major_formatter(_plain_log_formatter())
        axis.set_minor_formatter(_plain_log_formatter())


def _plain_log_formatter():
    """matplotlib's choice of which log ticks to label, as plain numbers in one unit per axis."""
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLog(LogFormatterSciNotation):
        def __call__(self, x, pos=None):
            if not super().__call__(x, pos):
                return ""
            return tick_text(x, max(abs(v) for v in self.axis.get_view_interval()))

    return PlainLog()


def _arrow(d: str) -> str:
    return "lower is better" if d == "minimize" else "higher is better"


def _step(ax, xy: np.ndarray, dx: str, **kw) -> None:
    """Attainment staircase of a 2-D front sorted by x (post step when x is minimised)."""
    if xy.shape[0]:
        ax.step(xy[:, 0], xy[:, 1], where="post" if dx == "minimize" else "pre", **kw)


def _draw_pair(ax, d: PairData, legend: bool = True) -> None:
    """One objective pair: infeasible and feasible designs, the front as a staircase, known parts
    as open black markers named beside them (labels placed by :func:`place_labels` after the
    figure's layout is done). ``legend`` False: the figure draws one legend for every panel."""
    if d.infeasible.size:
        ax.scatter(d.infeasible[:, 0], d.infeasible[:, 1], s=6, marker="x", c=GREY, alpha=0.45,
                   linewidths=0.6, label=f"infeasible ({d.n_infeasible:,})", rasterized=True)
    if d.feasible.size:
        ax.scatter(d.feasible[:, 0], d.feasible[:, 1], s=8, marker="o", c=OKABE_ITO[0],
                   alpha=0.35, linewidths=0, label=f"feasible ({d.n_feasible:,})",
                   rasterized=True)
    if d.all_objectives:
        _step(ax, d.front, d.dx, color=OKABE_ITO[3], lw=1.6)
        ax.plot(d.front[:, 0], d.front[:, 1], ls="none", marker="D", ms=4.5,
                color=OKABE_ITO[3], label=f"Pareto front ({len(d.front)})")
    else:
        _step(ax, d.pair_front, d.dx, color=OKABE_ITO[2], lw=1.4, ls="--", zorder=4, label="front of this pair")
        ax.plot(d.front[:, 0], d.front[:, 1], ls="none", marker="D", ms=4,
                color=OKABE_ITO[3], label=f"front, all objectives ({len(d.front)})")
        ax.set_title(f"front of this pair: {len(d.pair_front)} designs", fontsize=8)
    for n, (_, x, y) in enumerate(d.known):
        ax.plot([x], [y], ls="none", marker=MARKERS[(n + 7) % len(MARKERS)], ms=9,
                mfc="white", mec="black", mew=1.4, zorder=5)
    if d.known:
        ax.plot([], [], ls="none", marker="o", ms=7, mfc="white", mec="black", mew=1.4,
                label="known part (named beside it)")
    known = np.array([(x, y) for _, x, y in d.known], dtype=float).reshape(-1, 2)
    # every point drawn decides the scale: faded infeasible designs 10x above the front squash it too
    auto_log(ax, "x", d.infeasible[:, 0], d.feasible[:, 0], d.front[:, 0], known[:, 0])
    auto_log(ax, "y", d.infeasible[:, 1], d.feasible[:, 1], d.front[:, 1], known[:, 1])
    ax.set_xlabel(f"{axis_label(d.x)}, {_arrow(d.dx)}")
    ax.set_ylabel(f"{axis_label(d.y)}, {_arrow(d.dy)}")
    ax.grid(True, lw=0.4, alpha=0.5)
    if legend:
        ax.legend(fontsize=7, loc="best", framealpha=0.85)


def _staircase_points(xy: np.ndarray, dx: str, per_step: int = 8) -> np.ndarray:
    """Points along a front's staircase (its corners and both legs), for label placement."""
    if xy.shape[0] < 2:
        return xy
    a, b = xy[:-1], xy[1:]
    corner = np.column_stack([b[:, 0], a[:, 1]]) if dx == "minimize" else np.column_stack([a[:, 0], b[:, 1]])
    t = np.linspace(0, 1, per_step)[:, None, None]
    legs = np.concatenate([(a + t * (corner - a)).reshape(-1, 2), (corner + t * (b - corner)).reshape(-1, 2)])
    return np.concatenate([xy, legs])


#: where a label may go, in points from its marker: right, above, left, below and the diagonals,
#: nearest first; a label moved further than the nearest ring gets a thin leader line
_LABEL_RINGS = (8, 14, 22, 34, 50)
_LABEL_ANGLES = (20, -20, 160, 200, 90, 270, 60, 300, 120, 240, 0, 180)


def place_labels(ax, labels: list[tuple[str, float, float]], obstacles: np.ndarray, fontsize: float = 7) -> list:
    """Name each (label, x, y) beside its point where the label covers the fewest drawn points,
    stays inside the axes, and overlaps neither another label nor the legend: candidates on rings
    of :data:`_LABEL_RINGS` points around the point, scored in display coordinates after the
    layout (call once everything else is drawn). Returns the label artists."""
    if not labels:
        return []
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    pts = ax.transData.transform(np.asarray(obstacles, dtype=float).reshape(-1, 2)) if len(obstacles) else np.empty((0, 2))
    pts = pts[np.isfinite(pts).all(axis=1)]
    avoid = [leg.get_window_extent(renderer) for leg in ([ax.get_legend()] if ax.get_legend() else [])]
    own = ax.transData.transform(np.array([(x, y) for _, x, y in labels], dtype=float))
    scale = fig.dpi / 72.0
    placed, out = [], []
    leaders = np.empty((0, 2))
    for label, x, y in labels:
        best = None
        for ring in _LABEL_RINGS:
            for ang in _LABEL_ANGLES:
                dx, dy = ring * np.cos(np.radians(ang)), ring * np.sin(np.radians(ang))
                ha = "left" if dx > 1 else "right" if dx < -1 else "center"
                va = "bottom" if dy > 1 else "top" if dy < -1 else "center"
                t = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                                ha=ha, va=va)
                bb = t.get_window_extent(renderer).padded(2 * scale)
                t.remove()
                inside = (bb.x0 >= box.x0 and bb.x1 <= box.x1 and bb.y0 >= box.y0 and bb.y1 <= box.y1)
                covered = int(((pts[:, 0] >= bb.x0) & (pts[:, 0] <= bb.x1) & (pts[:, 1] >= bb.y0)
                               & (pts[:, 1] <= bb.y1)).sum()) if len(pts) else 0
                others = own[(own[:, 0] >= bb.x0) & (own[:, 0] <= bb.x1) & (own[:, 1] >= bb.y0) & (own[:, 1] <= bb.y1)]
                clash = sum(bb.overlaps(o) for o in placed + avoid) + len(others)
                if ring > _LABEL_RINGS[0] and placed:      # its leader line must not cross a placed label
                    x0, y0 = ax.transData.transform((x, y))
                    line = np.column_stack([np.linspace(x0, x0 + dx * scale, 12), np.linspace(y0, y0 + dy * scale, 12)])
                    clash += sum(bool(((line[:, 0] >= o.x0) & (line[:, 0] <= o.x1) & (line[:, 1] >= o.y0)
                                       & (line[:, 1] <= o.y1)).any()) for o in placed)
                if leaders.size:                            # nor sit on an earlier leader line
                    clash += int(((leaders[:, 0] >= bb.x0) & (leaders[:, 0] <= bb.x1) & (leaders[:, 1] >= bb.y0)
                                  & (leaders[:, 1] <= bb.y1)).any())
                score = covered + 1000 * (not inside) + 100 * clash + 0.05 * ring
                if best is None or score < best[0]:
                    best = (score, dx, dy, ha, va, ring, bb)
            if best[0] < 1:          # nothing covered on this ring: no need to go further
                break
        _, dx, dy, ha, va, ring, bb = best
        lead = {"arrowprops": {"arrowstyle": "-", "lw": 0.5, "color": "black", "shrinkA": 0, "shrinkB": 4}} \
            if ring > _LABEL_RINGS[0] else {}
        t = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize, ha=ha,
                        va=va, zorder=6, bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none",
                                              "alpha": 0.8}, **lead)
        t.set_in_layout(False)
        placed.append(bb)
        out.append(t)
        if lead:
            x0, y0 = ax.transData.transform((x, y))
            leaders = np.concatenate([leaders, np.column_stack([np.linspace(x0, x0 + dx * scale, 12),
                                                                np.linspace(y0, y0 + dy * scale, 12)])])
    return out


def _pair_obstacles(d: PairData) -> np.ndarray:
    return np.concatenate([d.infeasible, d.feasible, d.front, _staircase_points(d.front, d.dx),
                           _staircase_points(d.pair_front, d.dx)])


def figure_fronts(pairs: list[PairData], title: str):
    """One panel per objective pair (1, 3 or 6: rows of up to three, so no panel is empty), one
    legend for the figure, known parts named beside their markers."""
    n = len(pairs)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = new_figure(4.6 * cols if n > 1 else 5.6, 4.2 * rows + 0.9 if n > 1 else 4.6)
    axes = [fig.add_subplot(rows, cols, k + 1) for k in range(n)]
    for ax, d in zip(axes, pairs, strict=True):
        _draw_pair(ax, d, legend=n == 1)
    if n > 1:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5), fontsize=7,
                   frameon=False)
    suptitle(fig, "Pareto front", title)
    for ax, d in zip(axes, pairs, strict=True):
        place_labels(ax, d.known, _pair_obstacles(d))
    return fig


def figure_speedup(svb: pd.DataFrame, title: str):
    fig = new_figure(6.4, 4.6 + 0.16 * (svb["design"].nunique() + 1))
    ax = fig.add_subplot()
    for n, (name, g) in enumerate(svb.groupby("design", sort=False)):
        g = g.sort_values("batch")
        ax.plot(g["batch"], g["speedup"], color=OKABE_ITO[n % len(OKABE_ITO)],
                marker=MARKERS[n % len(MARKERS)], ms=5, lw=1.4, label=str(name))
    ax.axhline(1.0, color=GREY, ls=":", lw=1, label="no speedup")
    b = svb["batch"].to_numpy(dtype=float)
    if b.size and np.nanmin(b) > 0 and np.nanmax(b) / np.nanmin(b) >= 8:
        from matplotlib.ticker import NullFormatter

        ticks = np.unique(b[np.isfinite(b)])
        ax.set_xscale("log", base=2)
        if ticks.size <= 12:
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("batch size (sequences)")
    ax.set_ylabel("speedup over plain decoding (×)")
    ax.grid(True, lw=0.4, alpha=0.5)
    # below the axes: design names are long and a legend inside would cover the curves
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=1, fontsize=7, frameon=False)
    suptitle(fig, "Speedup against batch size", title)
    return fig


def figure_draft(d: DraftData, title: str):
    fig = new_figure(6.4, 4.8)
    ax = fig.add_subplot()
    styles = [(OKABE_ITO[1], "^", "-"), (OKABE_ITO[0], "o", "--")]
    for (label, pts, pf, hv, size), (color, marker, ls) in zip(d.groups, styles, strict=True):
        if pts.size:
            ax.scatter(pts[:, 0], pts[:, 1], s=6, c=color, marker=marker, alpha=0.2,
                       linewidths=0, rasterized=True)
        _step(ax, pf, d.dx, color=color, lw=1.6, ls=ls)
        ax.plot(pf[:, 0], pf[:, 1], ls="none", marker=marker, ms=5, color=color,
                label=f"{label}: HV = {hv:.4g} (front {size})")
    auto_log(ax, "x", *(g[1][:, 0] for g in d.groups if g[1].size))
    auto_log(ax, "y", *(g[1][:, 1] for g in d.groups if g[1].size))
    ax.set_xlabel(f"{axis_label(d.x)}, {_arrow(d.dx)}")
    ax.set_ylabel(f"{axis_label(d.y)}, {_arrow(d.dy)}")
    ax.grid(True, lw=0.4, alpha=0.5)
    leg_title = f"HV over all {d.n_objectives} objectives, shared reference"
    ax.legend(fontsize=7, title=leg_title, title_fontsize=7, loc="best")
    suptitle(fig, "Draft chip vs no draft chip", title)
    return fig


def figure_importance(importances: Mapping[str, Mapping[str, float]], title: str, top=12):
    items = [(obj, sorted(imp.items(), key=lambda kv: -kv[1])[:top])
             for obj, imp in importances.items() if imp]
    n = len(items)
    rows = max(len(v) for _, v in items)
    fig = new_figure(4.6 * n, 0.32 * rows + 1.6)
    for k, (obj, kv) in enumerate(items):
        ax = fig.add_subplot(1, n, k + 1)
        names = [short_knob(p) for p, _ in kv][::-1]
        vals = [float(v) for _, v in kv][::-1]
        ax.barh(names, vals, color=OKABE_ITO[k % len(OKABE_ITO)], edgecolor="black", lw=0.5,
                hatch=["", "//", "..", "xx"][k % 4])
        ax.set_title(axis_label(obj), fontsize=8)
        ax.set_xlabel("importance")
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="x", lw=0.4, alpha=0.5)
    suptitle(fig, "Parameter importance per objective (PED-ANOVA over the feasible trials, Optuna; "
                   "each panel sums to 1)", title)
    return fig


def figure_history(curves, title: str):
    fig = new_figure(6.4, 4.4)
    ax = fig.add_subplot()
    for n, (label, h) in enumerate(curves):
        ax.step(h["trial"], h["hypervolume"], where="post", color=OKABE_ITO[n % 8], lw=1.5,
                label=label, marker=MARKERS[n % len(MARKERS)], ms=3,
                markevery=max(1, len(h) // 12))
    ref = curves[0][1].attrs.get("reference", {})
    ax.set_xlabel("trial")
    units = [unit_of(k) for k in ref]
    unit = f" ({' · '.join(units)})" if ref and all(units) else ""
    ax.set_ylabel(f"hypervolume of the feasible front{unit}")
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right",
              title="reference: " + ", ".join(f"{k} = {v:.4g}" for k, v in ref.items()),
              title_fontsize=6)
    suptitle(fig, "Hypervolume against trial", title)
    return fig
