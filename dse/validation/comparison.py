"""Predicted against measured (`dse validate`): :func:`compare` predicts every modelled case of
:mod:`.measurements` through ``evaluate_design`` with the database as it is, :func:`acceptance_rows`
adds the acceptance table's rows, :func:`summary` the median errors; :func:`report` and
:func:`format_report` are what `dse validate` prints (with the refit of :mod:`.fits`), :func:`update_doc`
and :func:`doc_block` the copy quoted in docs/calibration.md.

Example:
    >>> from dse.validation import comparison
    >>> rows = comparison.compare()
    >>> s = comparison.summary(rows)
    >>> s["decode"]["all"]["median_abs_error"] <= 0.15
    True
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

from ..catalog.database import Database, load_database
from .fits import FIT_PARAMETERS, fit, stored_values
from .measurements import Case, cases, load_source


def predict(case: Case, db: Database | None = None) -> float | None:
    """The model's value for a case's metric (display units: ms, x, GB/s); None if not modelled."""
    from ..api import evaluate_design
    db = db or load_database()
    if not case.metric:
        return None
    if case.metric == "bandwidth_gb_s":
        dev = db.device(case.design["hw"])
        return dev.mem_bw_bytes_s * dev.mem_efficiency / 1e9
    if case.metric == "idle_w":
        from ..catalog.technology import load_technology
        from ..model.technology import known_part_energy
        return known_part_energy(load_technology(db.root), db.device(case.design["hw"]))["idle_w"]
    r = evaluate_design(db=db, **case.design)
    if not r["fits"]:
        return None
    return _metric(case, r)


def _metric(case: Case, r: dict[str, Any]) -> float:
    """The value of ``case.metric`` in an evaluate_design result."""
    if case.metric == "throughput_tok_s_gpu":
        d = case.design
        return d["batch"] * d["output"] / (r["request_latency_ms"] * 1e-3) / d["chips"]
    key = {"decode_ms": "baseline_ms_per_token", "spec_ms": "spec_ms_per_token", "speedup": "speedup",
           "ttft_ms": "ttft_ms", "energy_j_per_token": "energy_j_per_token"}[case.metric]
    return r[key]


def compare(rows: list[Case] | None = None, db: Database | None = None) -> list[dict[str, Any]]:
    """Predicted vs measured for every case: one dict per row, errors relative ((p - m) / m)."""
    db = db or load_database()
    out = []
    for c in (rows if rows is not None else cases(db)):
        p = predict(c, db)
        err = None if p is None or not c.measured else (p - c.measured) / c.measured
        note = c.note if p is not None or not c.metric else "; ".join(x for x in (c.note, "does not fit in memory") if x)
        out.append(dict(id=c.id, role=c.role if c.metric else "not modelled", fit_group=c.fit_group,
                        metric=c.metric or None, label=c.label, measured=c.measured, predicted=p, rel_error=err,
                        note=note, source=c.source, design=c.design))
    return out


def acceptance_rows(db: Database | None = None) -> list[dict[str, Any]]:
    """The acceptance table's rows as validation rows (dse.acceptance.fit): tau as published (converted
    to the row's own chain or tree) against the model's tau at that shape; role 'fit' for the rows
    the model is fitted on, 'held-out' for rows it can place but was not fitted on, 'not
    modelled' (with why) for the rest. The leave-one-source-out error is in the summary."""
    from ..acceptance.fit import predicted_rows, stored_fit
    from ..catalog.acceptance import load_table
    db = db or load_database()
    f = stored_fit(db)
    pred = predicted_rows(f, db.root)
    out = []
    for r in load_table(db.root):
        obs = (f.rows.get(r.id) or {}).get("tau")
        p = pred.get(r.id)
        role = ("fit" if r.fit else "held-out") if p is not None else "not modelled"
        label = f"{r.target_model or r.target} + {r.draft_kind} {r.shape} ({r.task}, T={r.temperature})"
        note = ("held out: a source kept out of the acceptance fit (docs/acceptance.md)" if r.held_out
                else r.why_not if not r.fit else "")
        if p is None and not note:
            note = "no tau at a known chain or tree"
        out.append(dict(id=f"acceptance:{r.id}", role=role, fit_group="acceptance" if r.fit else "",
                        metric="tau" if p is not None else None, label=label, measured=obs if p is not None else None,
                        predicted=p, rel_error=None if p is None else (p - obs) / obs, note=note, source=r.source,
                        design={}))
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median absolute relative error per metric family and role (fit, held-out, all)."""
    def stats(sel):
        errs = [abs(r["rel_error"]) for r in sel if r["rel_error"] is not None]
        return dict(n=len(errs), median_abs_error=statistics.median(errs) if errs else None,
                    max_abs_error=max(errs) if errs else None)

    fam = {"decode": ("decode_ms",), "speculative": ("spec_ms", "speedup"), "ttft": ("ttft_ms",),
           "throughput": ("throughput_tok_s_gpu",), "acceptance": ("tau",), "energy": ("energy_j_per_token",)}
    out: dict[str, Any] = {}
    for name, metrics in fam.items():     # the serving-load rows apart (load_summary)
        sel = [r for r in rows if r["metric"] in metrics and not _under_load(r)]
        out[name] = {"fit": stats([r for r in sel if r["role"] == "fit"]),
                     "held-out": stats([r for r in sel if r["role"] == "held-out"]),
                     "all": stats(sel)}
    out["load"] = load_summary(rows)
    out["energy_by_batch"] = energy_by_batch(rows)
    out["not_modelled"] = [r["id"] for r in rows if r["role"] == "not modelled" and not r["id"].startswith("acceptance:")]
    out["acceptance_not_placed"] = sum(1 for r in rows if r["role"] == "not modelled" and r["id"].startswith("acceptance:"))
    return out


def _under_load(row: dict[str, Any]) -> bool:
    """A row of the serving-load file run under load (continuous batching); its static batches (vLLM
    benchmark_latency) are counted with the large-batch throughput rows."""
    return row["id"].startswith("load:") and bool(row.get("design", {}).get("continuous", True))


#: the serving-load file's metrics (all held out) and their names in `dse validate`
LOAD_FAMILIES = (("ttft_ms", "time to first token"), ("decode_ms", "time per output token"),
                 ("throughput_tok_s_gpu", "output tok/s per GPU"))


def load_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The serving-load rows (serving_load_measurements_public.csv, all held out) per metric: n, median
    |error|, median ratio model/measured, the median ratio per source and device, and the three rows
    furthest from their measurement (largest |log ratio|)."""
    out = {}
    for metric, _ in LOAD_FAMILIES:
        sel = [r for r in rows if _under_load(r) and r["metric"] == metric and r["rel_error"] is not None]
        ratio = {r["id"]: 1.0 + r["rel_error"] for r in sel}
        groups: dict[str, list[float]] = {}
        for r in sel:
            groups.setdefault(f"{load_source(r['source'])} {r['design']['hw']}", []).append(ratio[r["id"]])
        worst = sorted(sel, key=lambda r: -abs(math.log(max(ratio[r["id"]], 1e-9))))[:3]
        out[metric] = dict(n=len(sel), median_abs_error=statistics.median(abs(r["rel_error"]) for r in sel) if sel
                           else None, median_ratio=statistics.median(ratio.values()) if sel else None,
                           by_source={k: dict(n=len(v), median_ratio=statistics.median(v)) for k, v in groups.items()},
                           worst=[dict(id=r["id"], ratio=ratio[r["id"]]) for r in worst])
    return out


#: batch bands of the energy rows' signed-error medians (summary["energy_by_batch"])
ENERGY_BATCH_BANDS = ((1, 16), (17, 128), (129, 100_000))


def energy_by_batch(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median signed error of the held-out energy rows per batch band (and GPU): a model right for the
    right reason has no sign that follows the batch."""
    out = []
    for hw in ("h100-sxm", "b200"):
        for lo, hi in ENERGY_BATCH_BANDS:
            errs = [r["rel_error"] for r in rows if r["metric"] == "energy_j_per_token" and r["role"] == "held-out"
                    and r["rel_error"] is not None and r["design"]["hw"] == hw and lo <= r["design"]["batch"] <= hi]
            out.append(dict(hw=hw, batch=(lo, hi), n=len(errs), median_error=statistics.median(errs) if errs else None))
    return out


_UNITS = {"decode_ms": "ms/token", "spec_ms": "ms/token", "speedup": "x", "bandwidth_gb_s": "GB/s",
          "ttft_ms": "ms", "throughput_tok_s_gpu": "tok/s/GPU", "tau": "tokens/pass", "energy_j_per_token": "J/token",
          "idle_w": "W/GPU"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _val(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def report(rows: list[dict[str, Any]] | None = None, db: Database | None = None) -> dict[str, Any]:
    """Everything `dse validate --json` prints: rows, summary, fit parameters (refit and stored)."""
    from ..acceptance.fit import loso_median, stored_fit
    db = db or load_database()
    rows = compare(db=db) + acceptance_rows(db) if rows is None else rows
    acc = stored_fit(db)
    return {"rows": rows, "summary": summary(rows),
            "fit_parameters": {k: {"sets": v[0], "fitted_on": v[1]} for k, v in FIT_PARAMETERS.items()},
            "refit": fit(db), "stored": stored_values(db),
            "acceptance_loso": {"median_abs_error": loso_median(acc), "median_abs_error_all_rows":
                                loso_median(acc, informative=False), "rows": len(acc.loso)}}


def format_report(rep: dict[str, Any]) -> str:
    """The text of `dse validate`: the table, the medians, the fit, and the notes per row."""
    rows = rep["rows"]
    head = ["id", "role", "metric", "measured", "predicted", "error", "row"]
    cells = [[r["id"], r["role"] + (f" ({r['fit_group']})" if r["role"] == "fit" else ""),
              f"{r['metric']} [{_UNITS[r['metric']]}]" if r["metric"] else "-",
              _val(r["measured"]), _val(r["predicted"]), _pct(r["rel_error"]), r["label"]] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    right = {3, 4, 5}

    def line(vals):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(vals, widths))).rstrip()

    out = [line(head), line(["-" * w for w in widths])] + [line(c) for c in cells]
    s = rep["summary"]
    out.append("")
    out.append("median |error| (n rows):")
    for fam, title in (("decode", "decode latency"), ("speculative", "speculative (spec ms/token, speedup)"),
                       ("ttft", "time to first token"), ("throughput", "large-batch throughput (request latency)"),
                       ("acceptance", "acceptance (tau of published rows, hardware_db/acceptance)"),
                       ("energy", "energy per token")):
        parts = [f"{role} {_pct(s[fam][role]['median_abs_error']).lstrip('+')} (n={s[fam][role]['n']})"
                 for role in ("fit", "held-out", "all")]
        out.append(f"  {title}: " + ", ".join(parts))
    bands = [f"{b['hw']} B {b['batch'][0]}-{b['batch'][1]} " if b["batch"][1] < 100_000 else f"{b['hw']} B >={b['batch'][0]} "
             for b in s["energy_by_batch"]]
    bands = [f"{x}{_pct(b['median_error'])} (n={b['n']})" for x, b in zip(bands, s["energy_by_batch"])]
    out.append("  energy per token, held-out median signed error by batch: " + ", ".join(bands))
    out.append("  serving under load (serving_load_measurements_public.csv, continuous batching at batch = "
               "concurrency; all held out), median ratio model/measured:")
    for metric, title in LOAD_FAMILIES:
        f = s["load"][metric]
        if not f["n"]:
            continue
        groups = ", ".join(f"{k} {g['median_ratio']:.2f} (n={g['n']})" for k, g in f["by_source"].items())
        worst = ", ".join(f"{w['id']} {w['ratio']:.3g}" for w in f["worst"])
        out.append(f"    {title}: {f['median_ratio']:.2f}, median |error| {100 * f['median_abs_error']:.1f}% "
                   f"(n={f['n']}); {groups}; furthest: {worst}")
    out.append(f"  not modelled: {len(s['not_modelled'])} rows ({', '.join(s['not_modelled'])})")
    if rep.get("acceptance_loso"):
        a = rep["acceptance_loso"]
        out.append(f"  acceptance, each source held out in turn (dse acceptance fit): {100 * a['median_abs_error']:.1f}% "
                   f"over the rows of methods with another source, {100 * a['median_abs_error_all_rows']:.1f}% over all "
                   f"{a['rows']} fitted rows; {s.get('acceptance_not_placed', 0)} acceptance rows not placed (no "
                   "acceptance statistic, method or task the model has)")
    out.append("")
    out.append("fitted defaults (refit from the fit rows / stored in the database):")
    for key in rep["refit"]:
        out.append(f"  {key} = {rep['refit'][key]:.4g} / {rep['stored'][key]:.4g}")
    for k, (sets, on) in FIT_PARAMETERS.items():
        out.append(f"  [{k}] {sets} <- {on}")
    out.append("")
    out.append("notes:")
    for r in rows:
        if r["note"]:
            out.append(f"  {r['id']}: {r['note']}")
    return "\n".join(out)


_BEGIN, _END = "<!-- BEGIN dse validate -->", "<!-- END dse validate -->"


def update_doc(path: str | Path, text: str) -> None:
    """Replace the block between the dse-validate markers of a Markdown file with ``text``."""
    p = Path(path)
    doc = p.read_text()
    i, j = doc.index(_BEGIN) + len(_BEGIN), doc.index(_END)
    p.write_text(doc[:i] + "\n```text\n" + text + "\n```\n" + doc[j:])


def doc_block(path: str | Path) -> str:
    """The text between the dse-validate markers of a Markdown file (without the code fence)."""
    doc = Path(path).read_text()
    block = doc[doc.index(_BEGIN) + len(_BEGIN):doc.index(_END)].strip()
    return block.removeprefix("```text").removesuffix("```").strip("\n")


if __name__ == "__main__":   # python -m dse.validation.comparison docs/calibration.md: refresh the doc's table
    update_doc(sys.argv[1], format_report(report()))
