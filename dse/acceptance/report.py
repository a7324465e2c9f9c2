"""The acceptance fit's report: coefficients, leave-one-source-out error, the band's held-out
coverage per method, the held-out sources' error (`dse acceptance fit`), and docs/acceptance.md's
block and figure (:func:`update_doc`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..catalog.acceptance import MODELLED_KINDS, TASKS, load_table
from ..process.matplotlib_env import import_matplotlib
from .fit import BAND_LEVEL, LAMBDAS, PARAMS, RIDGES, Fit, loso_median, predict_row_tau, stored_fit


def _per_method(results: list[dict], f: Fit) -> dict:
    per = {}
    for m in MODELLED_KINDS:
        v = [x for x in results if x["method"] == m]
        if not v:
            continue
        errs = [abs(x["error"]) for x in v]
        cov = [x["covered"] for x in v if "covered" in x and x.get("informative", True)]
        per[m] = dict(rows=len(v), sources=len({x["source"] for x in v}), informative=bool(v[0].get("informative", True)),
                      median_abs_error=float(np.median(errs)), max_abs_error=float(np.max(errs)),
                      median_signed_error=float(np.median([x["error"] for x in v])),
                      coverage=float(np.mean(cov)) if cov else None, band_logit=f.band(m, False),
                      band_logit_seen=f.band(m, True))
    return per


def _median(results, cond=lambda x: True) -> float | None:
    v = [abs(x["error"]) for x in results if cond(x)]
    return float(np.median(v)) if v else None


def report(f: Fit) -> dict:
    """Coefficients, bands, the leave-one-source-out error and band coverage per method and overall,
    and the same for the held-out sources (predicted by the full fit)."""
    loso = list(f.loso.values())
    inf = [x for x in loso if x.get("informative")]
    held = list(f.held_out.values())
    cov = [x["covered"] for x in inf if "covered" in x]
    return dict(ridge=f.ridge, lam=f.lam, band_level=BAND_LEVEL, coefficients={p: f.coef[p] for p in PARAMS},
                band_logit=f.sigma, per_method=_per_method(loso, f),
                loso_median=loso_median(f), loso_median_all_rows=loso_median(f, informative=False),
                loso_coverage=float(np.mean(cov)) if cov else None,
                loso_median_t0=_median(inf, lambda x: x.get("temperature") == 0),
                loso_median_t_pos=_median(inf, lambda x: (x.get("temperature") or 0) > 0),
                rows_fitted=len(f.loso), rows_in_table=len(f.rows), levels=len(f.anchors),
                held_out=dict(rows=len(held), sources=sorted({x["source"] for x in held}),
                              median_abs_error=_median(held),
                              coverage=float(np.mean([x["covered"] for x in held])) if held else None,
                              per_source={s: dict(rows=sum(x["source"] == s for x in held),
                                                  median_abs_error=_median(held, lambda x, s=s: x["source"] == s),
                                                  median_signed_error=float(np.median([x["error"] for x in held
                                                                                      if x["source"] == s])),
                                                  coverage=float(np.mean([x["covered"] for x in held
                                                                          if x["source"] == s])))
                                          for s in sorted({x["source"] for x in held})}))


def format_report(rep: dict) -> str:
    lvl = f"{100 * rep['band_level']:.0f}%"
    lines = [f"ridge penalty {rep['ridge']:g}, checkpoint-level penalty {rep['lam']:g} (the pair of "
             f"{', '.join(map(str, RIDGES))} x {', '.join(map(str, LAMBDAS))} with the smallest held-out median); "
             f"{rep['levels']} drafter levels (checkpoints or pairs)", "", "coefficients of logit(alpha):"]
    lines += [f"  {k:<28}{v:+.3f}" for k, v in rep["coefficients"].items()]
    lines += ["", "leave-one-source-out, tau predicted for each held-out row at its own chain or tree; band: the "
                  f"{lvl} quantile of |held-out logit residual|",
              "(coverage: each source's rows inside the band computed from the other sources' residuals):",
              f"  {'method':<12}{'rows':>5}{'sources':>8}{'median |err|':>14}{'signed':>8}{'max |err|':>11}"
              f"{'band new/seen':>15}{'coverage':>10}"]
    for m, v in rep["per_method"].items():
        note = "" if v["informative"] else "  (one source: held out, the method has no data)"
        cov = f"{100 * v['coverage']:.0f}%" if v["coverage"] is not None else "-"
        lines.append(f"  {m:<12}{v['rows']:>5}{v['sources']:>8}{100 * v['median_abs_error']:>13.1f}%"
                     f"{100 * v['median_signed_error']:>+7.1f}%{100 * v['max_abs_error']:>10.1f}%"
                     f"{v['band_logit']:>9.2f}/{v['band_logit_seen']:.2f}{cov:>10}{note}")
    cov = f"{100 * rep['loso_coverage']:.0f}%" if rep["loso_coverage"] is not None else "-"
    lines += ["", f"median |tau error| held out: {100 * rep['loso_median']:.1f}% over the rows of methods with "
                  f"another source ({cov} inside their {lvl} band); {100 * rep['loso_median_all_rows']:.1f}% over all "
                  f"{rep['rows_fitted']} fitted rows"]
    if rep["loso_median_t0"] is not None and rep["loso_median_t_pos"] is not None:
        lines.append(f"  at T = 0: {100 * rep['loso_median_t0']:.1f}%; at T > 0: {100 * rep['loso_median_t_pos']:.1f}%")
    h = rep["held_out"]
    if h["rows"]:
        lines += ["", f"held-out sources (never fitted; predicted by the full fit): {h['rows']} rows, median |tau error| "
                      f"{100 * h['median_abs_error']:.1f}%, {100 * h['coverage']:.0f}% inside the {lvl} band"]
        for s, v in h["per_source"].items():
            lines.append(f"  {s:<20}{v['rows']:>4} rows  median |err| {100 * v['median_abs_error']:.1f}% "
                         f"(signed {100 * v['median_signed_error']:+.1f}%), {100 * v['coverage']:.0f}% inside")
    return "\n".join(lines)


def predicted_rows(f: Fit, root=None) -> dict[str, float]:
    """The full fit's tau for every row it can place (a modelled method, one of the workload's
    tasks or the mix, a temperature, and a chain length or tree): id -> tau at the row's shape."""
    beta = np.array([f.coef[p] for p in PARAMS])
    out = {}
    for r in load_table(root):
        conv = f.rows.get(r.id) or {}
        if (r.draft_kind not in MODELLED_KINDS or r.task not in TASKS + ("mix",) or r.temperature is None
                or conv.get("tau") is None or (r.k is None and not r.is_tree and r.stat_kind != "alpha")):
            continue
        out[r.id] = predict_row_tau(beta, f.anchors, r)[1]
    return out


# ------------------------------------------------------------------ docs/acceptance.md and its figure

_BEGIN, _END = "<!-- BEGIN dse acceptance fit -->", "<!-- END dse acceptance fit -->"


def plot_fit(f: Fit, path, root=None) -> None:
    """The held-out figure: each fitted row's tau predicted with its source left out, against the
    published tau, one marker per method; and the error per method."""
    Figure = import_matplotlib("matplotlib.figure").Figure
    rows = {r.id: r for r in load_table(root)}
    colours = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#9a9a9a"]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "<"]
    fig = Figure(figsize=(11.0, 4.8), layout="constrained")
    ax, bx = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    hi = max(max(v["tau_obs"], v["tau_pred"]) for v in [*f.loso.values(), *f.held_out.values()]) * 1.05
    ax.plot([1, hi], [1, hi], color="#666666", lw=0.8)
    for frac in (0.88, 1.12):
        ax.plot([1, hi], [1 * frac, hi * frac], color="#999999", lw=0.6, ls=":")
    names, meds = [], []
    for i, m in enumerate(MODELLED_KINDS):
        v = [x for x in f.loso.values() if x["method"] == m]
        if not v:
            continue
        inf = v[0].get("informative")
        ax.scatter([x["tau_obs"] for x in v], [x["tau_pred"] for x in v], s=18 if inf else 10,
                   marker=markers[i], color=colours[i], alpha=0.85 if inf else 0.35, linewidths=0,
                   label=f"{m} ({len(v)} rows, {len({x['source'] for x in v})} source{'s' if len({x['source'] for x in v}) > 1 else ''})")
        names.append(m + ("" if inf else " *"))
        meds.append(100 * float(np.median([abs(x["error"]) for x in v])))
    held = list(f.held_out.values())
    if held:        # the held-out sources, never fitted: hollow, predicted by the full fit
        ax.scatter([x["tau_obs"] for x in held], [x["tau_pred"] for x in held], s=22, facecolors="none",
                   edgecolors="#000000", linewidths=0.8,
                   label=f"held-out sources ({len(held)} rows: {', '.join(sorted({x['source'] for x in held}))})")
    ax.legend(fontsize=7, loc="upper left")
    from matplotlib.ticker import FuncFormatter, NullFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())
        axis.set_ticks([1, 1.5, 2, 3, 4, 6, 8])
    bx.xaxis.set_major_formatter(plain)
    ax.set_xlabel("published tau (tokens per target pass, at the row's own chain or tree)")
    ax.set_ylabel("predicted with the row's source left out (hollow: never fitted)")
    ax.set_title("Leave-one-source-out: predicted vs published tau (dotted: +-12%)", fontsize=9)
    ax.grid(True, lw=0.4, alpha=0.5)
    bx.barh(range(len(names))[::-1], meds, color="#0072B2")
    bx.set_yticks(range(len(names))[::-1], names, fontsize=8)
    bx.axvline(12, color="#D55E00", lw=0.8, ls="--")
    bx.set_xscale("log")
    bx.set_xlabel("median |tau error| held out (%), log scale; dashed: 12%")
    bx.set_title("Per method (* one source: held out, the method has no data left)", fontsize=9)
    for y, v in zip(range(len(names))[::-1], meds):
        bx.text(v * 1.05, y, f"{v:.1f}%", va="center", fontsize=7)
    fig.suptitle(f"The acceptance model, fitted on {len(f.loso)} published rows of "
                 f"{len({r.source_key for r in rows.values() if r.id in f.loso})} sources: median held-out "
                 f"error {100 * loso_median(f):.1f}% (methods with another source), "
                 f"{100 * loso_median(f, False):.1f}% (all)", fontsize=10)
    fig.savefig(path, format="png", dpi=150)


def update_doc(path, img) -> None:
    """Refresh docs/acceptance.md between its markers (the fit's report) and its figure."""
    f = stored_fit()
    plot_fit(f, img)
    p = Path(path)
    doc = p.read_text()
    i, j = doc.index(_BEGIN) + len(_BEGIN), doc.index(_END)
    p.write_text(doc[:i] + "\n```text\n" + format_report(report(f)) + "\n```\n" + doc[j:])


if __name__ == "__main__":   # python -m dse.acceptance.report docs/acceptance.md docs/img/acceptance-fit.png
    import sys
    update_doc(sys.argv[1], sys.argv[2])
