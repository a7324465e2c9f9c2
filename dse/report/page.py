"""The report folder: which figures a report gets, their captions, and ``index.html``.

:func:`write_report` draws the figures that the results support (:mod:`.figures`), saves them as
PNG (150 dpi) and writes one ``index.html`` that embeds them as base64 ``data:`` URIs next to the
front's table: no external CSS, JS or fonts, so the file can be mailed or archived on its own.
Figures left out are listed in the page with the reason.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DseError
from ..results import analysis as da
from ..results.store import write_bytes
from .figures import (
    DPI,
    DRAFT_KNOB,
    MAX_SCATTER,
    codesign_data,
    draft_data,
    figure_codesign,
    figure_draft,
    figure_fronts,
    figure_history,
    figure_importance,
    figure_speedup,
    figure_style,
    history_data,
    pairs_data,
    why_no_draft_figure,
    why_no_history_figure,
)
from .labels import axis_label, known_part_name_column, short_knob, value_text
from .serving_figure import ServingData, figure_serving, serving_caption

__all__ = ["write_report", "workload_title"]


def workload_title(df: pd.DataFrame) -> str:
    """One or two lines naming the study's workload and its speculative settings.

    The workload comes from ``df.attrs["dse"]["study"]["workload"]`` (scalar entries, one
    level of nesting flattened). alpha, tau and k come from the workload when it sets them,
    else from the result columns (one value, or the min-max range across designs).
    """
    meta = df.attrs.get("dse") or {}
    study = meta.get("study") if isinstance(meta.get("study"), Mapping) else {}
    wl = study.get("workload")
    bits: list[str] = []
    spec: dict[str, str] = {}
    if isinstance(wl, Mapping):
        flat: dict[str, object] = {}
        for k, v in wl.items():
            if isinstance(v, Mapping):
                flat.update({f"{k}.{kk}": vv for kk, vv in v.items()})
            else:
                flat[k] = v
        for k, v in flat.items():
            leaf = k.rsplit(".", 1)[-1]
            if leaf in ("alpha", "tau", "k") and v is not None:
                spec.setdefault(leaf, value_text(v) if not isinstance(v, list) else
                                "[" + ", ".join(value_text(x) for x in v) + "]")
            elif k == "draft" and DRAFT_KNOB in df.columns:
                continue        # the draft is a knob: the workload's first choice says nothing
            elif isinstance(v, str | int | float | bool) and len(bits) < 6:
                bits.append(f"{k}={value_text(v)}")
    elif wl:
        bits.append(str(wl))
    for key in ("alpha", "tau", "k"):
        if key in spec or key not in df.columns or not pd.api.types.is_numeric_dtype(df[key]):
            continue
        vals = df[key].to_numpy(dtype=np.float64, na_value=np.nan)
        vals = vals[np.isfinite(vals)]
        if vals.size:
            lo, hi = vals.min(), vals.max()
            spec[key] = value_text(float(lo)) if lo == hi else f"{value_text(float(lo))}–{value_text(float(hi))}"
    sym = {"alpha": "α", "tau": "τ", "k": "k"}
    line2 = ", ".join(f"{sym[k]} = {spec[k]}" for k in ("alpha", "tau", "k") if k in spec)
    name = study.get("name") or ""
    line1 = f"{name}: {', '.join(bits)}" if name and bits else (name or ", ".join(bits))
    line1 = line1 or "dse results"
    return f"{line1}\n{line2}" if line2 else line1


def known_caption(known: pd.DataFrame | None, objs) -> str:
    """Which known parts are marked, and which lack an objective value and are not."""
    if known is None or not len(known):
        return ""
    lab = known_part_name_column(known)
    names = known[lab].astype(str) if lab else pd.Series(known.index.astype(str), index=known.index)
    cols = [m for m, _ in objs]
    have = known.reindex(columns=cols).apply(pd.to_numeric, errors="coerce").notna()
    missing = [f"{names[i]} (no {', '.join(c for c in cols if not have.at[i, c])})"
               for i in known.index if not have.loc[i].all()]
    text = (" Open black markers: known parts on the study's workload, each at the fewest chips that hold it (the"
            " draft on the target chips)")
    runs = known["runs"].fillna("").astype(str) if "runs" in known.columns else None
    if runs is not None and (runs != "").any():         # the study searches its draft or batch: each part's best
        best = f"{'least' if objs[0][1] == 'minimize' else 'greatest'} {objs[0][0]}"
        text += (f", with the study's draft and batch (those it searches) that give it the {best}: "
                 + "; ".join(f"{names[i]} {runs[i]}" for i in known.index) + ".")
    else:
        text += ", with the study's draft and batch."
    notes = sorted({str(x) for x in known["note"].fillna("")} - {""}) if "note" in known.columns else []
    if notes:
        text += f" Fixed for them: {'; '.join(notes)}."
    if any(c.endswith("cost_usd") for c in cols):
        text += (" Cost is like for like: known parts and synthesised designs both carry the manufacturing"
                 " estimate (silicon, memory, packaging; hardware_db/technology); street prices are in price_usd.")
    if any(c.endswith("power_w") for c in cols):
        text += (" Power is like for like: known parts carry the energy model synthesised designs get (compute,"
                 " memory, leakage, links; the vendor TDP only where their node or memory is not in the tables).")
    return text + (f" Not drawn where a value is missing: {'; '.join(missing)}." if missing else "")


def _cell_text(v) -> str:
    """A front-table cell as the terminal shows it: '-' where there is no value (a knob that does not act
    on the design; pandas' nullable columns would print '<NA>'), floats at 4 significant digits."""
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _table_html(table: pd.DataFrame) -> str:
    shown = table.rename(columns={c: axis_label(c).replace(c, short_knob(c)) for c in table.columns})
    return shown.astype(object).map(_cell_text).to_html(index=False, escape=True, border=0, classes="front")


_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;
color:#111}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}figure{margin:1em 0}
img{max-width:100%;height:auto;border:1px solid #ddd}figcaption{font-size:.9em;color:#333}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th{background:#f2f2f2}table.meta td,table.meta th{text-align:left}
.scroll{overflow-x:auto}"""


def write_report(df: pd.DataFrame, out_dir, *, known_parts: pd.DataFrame | None = None,
                 speedup_vs_batch: pd.DataFrame | None = None,
                 importances: dict[str, dict[str, float]] | None = None,
                 progress: Callable[[str], None] | None = None, objectives=None,
                 table_rows: int = 100, front: pd.DataFrame | None = None, epsilon=da.DISPLAY_EPSILON,
                 skipped: list[tuple[str, str]] | None = None, serving: ServingData | None = None) -> dict:
    """Write PNG figures and a self-contained ``index.html`` into ``out_dir``.

    Figures: ``front.png`` (one panel per objective pair; feasible points, infeasible in
    grey, the front as a staircase, ``known_parts`` as labelled markers),
    ``speedup_vs_batch.png`` (if given: columns ``design``, ``batch``, ``speedup``),
    ``draft_chip.png`` (if ``params_draft_chip_enabled`` takes both values),
    ``importance.png`` (if ``importances`` = ``{objective: {param: importance}}``) and
    ``hypervolume.png`` (if there is a ``trial`` column and a feasible design).

    Args:
        df: results (:func:`dse.results.analysis.load_results`); ``df.attrs["dse"]`` supplies the
            objectives and the workload named in titles.
        out_dir: created if missing; existing files of the same names are replaced, each atomically (a
            failed write is one line naming the file, exit 1, and leaves no partial file).
        known_parts: real devices to mark, with a ``name`` (or ``label``) column and the
            objective columns.
        progress: called with a short message before each figure.
        objectives: override the study objectives (see :func:`dse.results.analysis.objectives_of`).
        table_rows: rows of the front table shown in the HTML.
        front: the front's rows with the table's columns (:func:`dse.results.analysis.front_of`), when
            ``df`` holds only what the figures need of every row (a sweep); default
            ``dse.results.analysis.front(df)``.
        epsilon: the front table's near-ties within this (relative, per objective) collapsed
            into one row (dse.results.analysis.front); the figures draw the exact front.
        skipped: (figure, why) of figures the caller did not compute; with those this function
            leaves out, they are listed in the page and returned.
        serving: a study with an SLA: its front designs' curves over concurrency
            (:func:`dse.report.serving_figure.serving_data`), drawn as ``serving.png``.

    Returns:
        ``{"html": str path, "figures": [str paths], "skipped": [(figure, why)]}``.
    """
    objs = da.objectives_of(df, objectives)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = workload_title(df)
    say = progress or (lambda msg: None)
    made: list[tuple[Path, str, str]] = []   # (path, heading, caption)
    skipped = list(skipped or [])            # (figure, why it is not drawn)

    def save(fig, name, heading, caption):
        path = out / name
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=DPI)
        write_bytes(path, png.getvalue())         # atomic: a full disk leaves the old file or none, never half
        made.append((path, heading, caption))

    tally = da.counts(df, objs)
    rows_noun = "grid points" if (df.attrs.get("dse") or {}).get("sampler") == "grid" else "trials"
    with figure_style():
        if len(objs) < 2:
            skipped.append(("Pareto front", "the study has one objective: no trade-off to draw"))
        else:
            say("figure: Pareto front")
            pairs = pairs_data(df, objs, known_parts)
            sampled = any(p.n_feasible > MAX_SCATTER for p in pairs)
            save(figure_fronts(pairs, title), "front.png", "Pareto front",
                 f"{tally['feasible']:,} feasible of {tally['designs']:,} designs ({tally['rows']:,} {rows_noun}); "
                 f"{tally['front']:,} on the front (feasible and non-dominated over {len(objs)} objectives; a "
                 f"design proposed twice counts once). Grey crosses are "
                 f"infeasible designs (those that do not fit have no latency and are not drawn)."
                 + known_caption(known_parts, objs)
                 + (f" Background points are a random sample of {MAX_SCATTER:,}." if sampled
                    else ""))
        if speedup_vs_batch is not None and len(speedup_vs_batch):
            missing = {"design", "batch", "speedup"} - set(speedup_vs_batch.columns)
            if missing:
                raise DseError(f"speedup_vs_batch lacks column(s) {', '.join(sorted(missing))}; "
                               f"expected design, batch, speedup")
            say("figure: speedup against batch size")
            save(figure_speedup(speedup_vs_batch, title), "speedup_vs_batch.png",
                 "Speedup against batch size",
                 "Speculative-decoding speedup over plain decoding against batch size for the "
                 "designs given (dotted line: no speedup). A line ends where the design no "
                 "longer fits in memory (the KV cache grows with the batch).")
        if serving is not None:
            say("figure: serving under the SLA")
            save(figure_serving(serving, title), "serving.png", "Serving under the SLA", serving_caption(serving))
        draft = draft_data(df, objs)
        if draft is None:
            skipped.append(("Draft chip vs no draft chip", why_no_draft_figure(df, objs)))
        else:
            say("figure: draft chip vs no draft chip")
            save(figure_draft(draft, title), "draft_chip.png", "Draft chip vs no draft chip",
                 "Fronts of the designs with and without a separate draft chip, on the first two "
                 "objectives. Hypervolumes use all objectives and one shared reference: "
                 + ", ".join(f"{k} = {v:.4g}" for k, v in draft.reference.items()) + ".")
        codesign = codesign_data(df, objs)
        if codesign is not None:
            say("figure: which draft wins where")
            save(figure_codesign(codesign, title), "drafts.png", "Which draft wins where",
                 "Left: every feasible design coloured by its draft (faint), the front of the first two "
                 "objectives outlined. Right: for each chip class (the target's memory, with or without a draft "
                 f"chip) and batch, the draft of the feasible design with the lowest {axis_label(codesign.x)}, "
                 "that value and its speedup over plain decoding on the same chips. Acceptance per draft "
                 "from the published table or the acceptance model (acceptance_source).")
        if importances and any(importances.values()):
            say("figure: parameter importance")
            save(figure_importance(importances, title), "importance.png",
                 "Parameter importance", "Importance of each knob per objective (as given).")
        curves = history_data(df, objs)
        if not curves:
            skipped.append(("Hypervolume against trial", why_no_history_figure(df, objs)))
        else:
            say("figure: hypervolume against trial")
            save(figure_history(curves, title), "hypervolume.png", "Hypervolume against trial",
                 "Hypervolume of the feasible front after each trial, with one fixed reference "
                 "(worst feasible value per objective pushed out by 10% of its range).")

    say("writing index.html")
    eps = da.epsilon_of(epsilon, objs)
    table = da.front_table(df if front is None else front, objs, epsilon=eps)
    html_path = out / "index.html"
    write_bytes(html_path, _html(df, objs, title, made, table, table_rows, tally, rows_noun, eps, skipped)
                .encode("utf-8"))
    return {"html": str(html_path), "figures": [str(p) for p, _, _ in made], "skipped": skipped}


def _html(df, objs, title, made, table, table_rows, tally, rows_noun, epsilon, skipped) -> str:
    meta = df.attrs.get("dse") or {}
    esc = html.escape
    lines = title.split("\n")
    info = [("workload", lines[0]), *([("speculative", lines[1])] if len(lines) > 1 else []),
            ("objectives", ", ".join(f"{m} ({d})" for m, d in objs)),
            ("constraints", ", ".join(
                f"{c.get('metric')}" + (f" ≤ {c['max']}" if c.get("max") is not None else "")
                + (f" ≥ {c['min']}" if c.get("min") is not None else "")
                for c in meta.get("constraints") or [] if isinstance(c, Mapping)) or "none"),
            ("designs", f"{tally['designs']:,} in {tally['rows']:,} {rows_noun} ({tally['feasible']:,} feasible, "
                        f"{tally['front']:,} on the front; a design proposed twice counts once)"),
            ("dse version", str(meta.get("dse_version", "?"))),
            ("tech fingerprint", str(meta.get("tech_fingerprint", "?")))]
    name = (meta.get("study") or {}).get("name", "") if isinstance(meta.get("study"), Mapping) \
        else ""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>dse report{esc(': ' + name) if name else ''}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>dse report{esc(': ' + name) if name else ''}</h1>",
             '<table class="meta">']
    parts += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in info]
    parts.append("</table>")
    for path, heading, caption in made:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts += [f"<h2>{esc(heading)}</h2>", "<figure>",
                  f'<img src="data:image/png;base64,{data}" alt="{esc(heading)}">',
                  f"<figcaption>{esc(caption)}</figcaption></figure>"]
    if skipped:
        parts += ["<h2>Figures not drawn</h2>", "<ul>"]
        parts += [f"<li>{esc(name)}: {esc(why)}.</li>" for name, why in skipped]
        parts.append("</ul>")
    shown = table.head(table_rows)
    note = (f"first {len(shown)} of {len(table)} designs, " if len(table) > len(shown) else "")
    eps = [float(e) for e in epsilon]
    near = (f"{len(table):,} of the front's {tally['front']:,} designs: near-ties within "
            f"{'/'.join(f'{e * 100:g}%' for e in dict.fromkeys(eps))} (relative) of a row shown in every "
            f"objective are left out (the figures and the results hold the exact front); " if any(eps) else "")
    parts += ["<h2>Front designs</h2>",
              f"<p>{esc(near)}{esc(note)}best first by {esc(objs[0][0])}.</p>",
              f'<div class="scroll">{_table_html(shown)}</div>', "</body></html>"]
    return "\n".join(parts)
