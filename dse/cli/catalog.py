"""The commands that show the database: `dse hw`, `dse models` and `dse runtimes` (list, show),
`dse acceptance` (the published acceptance table and the model fitted on it) and `dse validate`
(the model against public measurements).
"""

from __future__ import annotations

import json

import click

from ..errors import DseError


def _entries(kind: str):
    from ..catalog.database import load_database
    from ..catalog.specs import to_display
    db = load_database()
    rows = []
    for name in db.names(kind):
        spec = db.device(name) if kind == "device" else db.get(kind, name)   # links filled from their class
        row = to_display(spec)
        if kind == "device":        # the capacity in both units, whichever the file gives (dse.units)
            row["memory_capacity_gib"], row["memory_capacity_gb"] = _capacities(spec)
        rows.append(row)
    return rows


def _capacities(dev) -> tuple[float, float]:
    """(GiB, GB) of a device's capacity, to 4 significant digits."""
    from ..units import FACTOR
    return (float(f"{dev.memory_bytes / FACTOR['gib']:.4g}"), float(f"{dev.memory_bytes / FACTOR['gb']:.4g}"))


def _print_entries(rows: list[dict], as_json: bool, cols: list[str]) -> None:
    """A database listing: every field as JSON, or the chosen columns as a table."""
    from .text import table
    click.echo(json.dumps(rows, indent=2) if as_json else table(rows, cols))


@click.group("hw")
def hw_group():
    """Accelerators in the database."""


@hw_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Every field of every accelerator as JSON.")
def hw_list(as_json):
    """List accelerators (name, memory in GiB and GB, bandwidth, BF16 TFLOP/s)."""
    _print_entries(_entries("device"), as_json, ["name", "display_name", "memory_capacity_gib", "memory_capacity_gb",
                                                 "mem_bw_tb_s", "peak_tflops_bf16", "peak_tflops_fp8", "link_bw_gb_s",
                                                 "tdp_w"])


@hw_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Fields, sources and estimates as JSON.")
def hw_show(name, as_json):
    """Every field of one accelerator, with its source."""
    _show("device", name, as_json)


@click.group("models")
def models_group():
    """Models in the database."""


@models_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Every field of every model as JSON.")
def models_list(as_json):
    """List models (name, layers, hidden, heads, parameters)."""
    from ..catalog.database import load_database
    from ..model.transformer import total_params
    db = load_database()
    rows = []
    for r in _entries("model"):
        r["params_computed_b"] = round(total_params(db.model(r["name"])) / 1e9, 3)
        rows.append(r)
    _print_entries(rows, as_json, ["name", "kind", "num_layers", "hidden_size", "num_attention_heads",
                                   "num_kv_heads", "num_experts", "params_b", "params_computed_b"])


@models_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Fields, sources and estimates as JSON.")
def models_show(name, as_json):
    """Every field of one model, with its source."""
    _show("model", name, as_json)


@click.group("runtimes", short_help="Software stacks and their fixed costs.")
def runtimes_group():
    """Software stacks (fixed costs per kernel, step and speculative iteration)."""


@runtimes_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Every field of every runtime as JSON.")
def runtimes_list(as_json):
    """List runtimes (fixed costs in microseconds, memory reserve)."""
    _print_entries(_entries("runtime"), as_json, ["name", "display_name", "kernel_launch_us", "kernels_per_layer",
                                                  "step_overhead_us", "spec_overhead_us", "memory_reserve_fraction"])


@runtimes_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Fields, sources and estimates as JSON.")
def runtimes_show(name, as_json):
    """Every field of one runtime, with its source."""
    _show("runtime", name, as_json)


def _show(kind: str, name: str, as_json: bool):
    from ..catalog.database import load_database
    from ..catalog.specs import to_display
    db = load_database()
    spec = db.device(name) if kind == "device" else db.get(kind, name)
    fields = to_display(spec)
    try:
        raw = db.raw(kind, spec.name)
    except DseError:
        raw = {}
    sources, estimates = raw.get("sources") or {}, set(raw.get("estimates") or [])
    if kind == "device":      # the capacity in the other unit, and link numbers from the class (links.yaml)
        gib, gb = _capacities(spec)
        given = "memory_capacity_gib" if spec.capacity_gib_bytes is not None else "memory_capacity_gb"
        other = "memory_capacity_gb" if given == "memory_capacity_gib" else "memory_capacity_gib"
        fields[other] = gb if other == "memory_capacity_gb" else gib
        sources[other] = f"= {given} in {'GB (1e9 bytes)' if other.endswith('_gb') else 'GiB (2^30 bytes)'}"
        from ..catalog.yamlio import load_yaml
        classes = load_yaml(db.root / "technology" / "links.yaml")["classes"]
        for prefix, name in (("link", spec.link_class), ("scale_out", "scale-out")):
            cls = classes[name]
            for key, entry in ((f"{prefix}_latency_us", cls["latency_us"]), (f"{prefix}_efficiency", cls["efficiency"])):
                if key not in raw:
                    sources[key] = (f"link class {name}, hardware_db/technology/links.yaml: "
                                    f"{entry.get('source') or entry.get('reason')}")
                    if entry.get("estimate"):
                        estimates.add(key)
    if kind == "model":
        from ..model.transformer import total_params
        fields["params_computed_b"] = round(total_params(spec) / 1e9, 3)
    if as_json:
        click.echo(json.dumps({"fields": fields, "sources": sources, "estimates": sorted(estimates),
                               "notes": raw.get("notes")}, indent=2))
        return
    width = max(len(k) for k in fields)
    for key, value in fields.items():
        if value is None:
            continue
        mark = "  [estimate]" if key in estimates else ""
        src = f"  ({sources[key]})" if key in sources else ""
        click.echo(f"{key:<{width}}  {value}{mark}{src}")
    if raw.get("notes"):
        click.echo(f"\nnotes: {raw['notes']}")


@click.group("acceptance", short_help="Published acceptance statistics and the acceptance model.")
def acceptance_group():
    """The published acceptance table (hardware_db/acceptance/published.csv) and the model fitted on it."""


_ACC_COLS = ["id", "target", "draft", "kind", "task", "T", "shape", "statistic", "alpha", "tau", "fit"]


def _acc_rows(target, draft, task):
    from ..acceptance.fit import stored_fit
    from ..catalog.acceptance import filter_rows, load_table
    f = stored_fit()
    out = []
    for r in filter_rows(load_table(), target=target, draft=draft, task=task):
        conv = f.rows.get(r.id, {})
        out.append(dict(id=r.id, target=r.target_model or r.target, draft=r.draft_model or r.draft,
                        kind=r.draft_kind, task=r.task, T=r.temperature, shape=r.shape,
                        statistic=f"{r.stat_kind} {r.stat_value:g}" if r.stat_value is not None else r.stat_kind,
                        alpha=conv.get("alpha"), tau=conv.get("tau"),
                        fit="yes" if r.fit else "held-out" if r.held_out else "no", row=r, conv=conv))
    return out


@acceptance_group.command("list")
@click.option("--target", default=None,
              help="Target: a dse model name or part of the published name [default: every target].")
@click.option("--draft", default=None,
              help="Draft: a kind (eagle3, model, ngram, ...), a dse model or part of a name [default: every draft].")
@click.option("--task", "text_task", default=None,
              help="chat, code, math, summarization, translation, qa, rag, mix [default: every task].")
@click.option("--checkpoints", is_flag=True,
              help="List the draft checkpoints (hardware_db/acceptance/checkpoints.yaml) instead of the rows: "
                   "target, kind, the table rows of each and its fitted level.")
@click.option("--json", "as_json", is_flag=True, help="Every field of the rows as JSON.")
def acceptance_list(target, draft, text_task, checkpoints, as_json):
    """List published acceptance rows (alpha and tau as the model uses them), or the draft checkpoints."""
    import dataclasses

    from .text import table
    if checkpoints:
        _list_checkpoints(target, draft, as_json)
        return
    rows = _acc_rows(target, draft, text_task)
    if as_json:
        click.echo(json.dumps([{**dataclasses.asdict(r["row"]), **{"alpha_model": r["conv"].get("alpha"),
                                 "tau_model": r["conv"].get("tau"), "conversion": r["conv"].get("how")}}
                               for r in rows], indent=2))
        return
    click.echo(table([{k: v for k, v in r.items() if k in _ACC_COLS} for r in rows], _ACC_COLS))
    click.echo(f"{len(rows)} rows (`dse acceptance show ID` for the source and the conversion)")


def _list_checkpoints(target, draft, as_json):
    """`dse acceptance list --checkpoints`: the registry, each with its table rows and fitted level u."""
    import dataclasses

    from ..acceptance.fit import level_key, stored_fit
    from ..catalog.acceptance import load_table
    from ..catalog.checkpoints import KIND_METHODS, load_checkpoints
    from .text import table
    f = stored_fit()
    rows = load_table()
    out = []
    for c in load_checkpoints().values():
        if target and not (target.lower() == c.target.lower() or target.lower() in c.target_name.lower()):
            continue
        if draft and not (draft.lower() in KIND_METHODS[c.kind] or draft.lower() in c.id.lower()):
            continue
        mine = [r for r in rows if r.checkpoint == c.id]
        u = f.anchors.get(level_key(("ckpt", c.id))) if c.kind != "model" else None
        out.append(dict(id=c.id, target=c.target, kind=c.kind, draft_as=" or ".join(f"{m}:{c.id}" if m != "model"
                                                                                   else c.id.split("/")[-1]
                                                                                   for m in KIND_METHODS[c.kind]),
                        rows=len(mine), fitted=sum(r.fit for r in mine), level=None if u is None else round(u[0], 3),
                        recipe=c.recipe, source=c.source, checkpoint=c))
    if as_json:
        click.echo(json.dumps([{**dataclasses.asdict(o["checkpoint"]), "rows": o["rows"], "fitted_rows": o["fitted"],
                                "level_logit": o["level"]} for o in out], indent=2))
        return
    cols = ["id", "target", "kind", "rows", "fitted", "level"]
    click.echo(table([{k: v for k, v in o.items() if k in cols} for o in out], cols))
    click.echo(f"{len(out)} checkpoints (draft with one as --draft eagle3:<id>, eagle:<id>, ...; level: its fitted "
               "effect on logit(alpha), none without fitted rows: the method's mean)")


@acceptance_group.command("show")
@click.argument("ident", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The row, its conversion and its held-out prediction as JSON.")
def acceptance_show(ident, as_json):
    """One row with its source, how it converts to the model's alpha, and its leave-one-source-out prediction."""
    import dataclasses

    from ..acceptance.fit import stored_fit
    from ..catalog.acceptance import load_table, row_by_id
    r = row_by_id(load_table(), ident)
    f = stored_fit()
    conv, loso = f.rows.get(r.id, {}), f.loso.get(r.id) or f.held_out.get(r.id)
    if as_json:
        click.echo(json.dumps({"row": dataclasses.asdict(r), "conversion": conv, "held_out": loso}, indent=2))
        return
    for key, value in dataclasses.asdict(r).items():
        if value not in (None, "", ()):
            shown = ("yes" if value else "no") if isinstance(value, bool) else \
                ";".join(f"{x:g}" for x in value) if isinstance(value, tuple) else value
            click.echo(f"{key:<16}{shown}")
    click.echo(f"{'conversion':<16}{conv.get('how', '-')}")
    if loso:
        how = "never fitted (a held-out source)" if r.held_out else f"with {loso['source']} left out of the fit"
        click.echo(f"{'held out':<16}{how}, the model predicts tau "
                   f"{loso['tau_pred']:.3f} against {loso['tau_obs']:.3f} ({100 * loso['error']:+.1f}%)")


@acceptance_group.command("fit")
@click.option("--write", is_flag=True, help="Store the fit in hardware_db/acceptance/fit.json.")
@click.option("--json", "as_json", is_flag=True, help="Coefficients, bands and held-out errors as JSON.")
def acceptance_fit(write, as_json):
    """Fit the acceptance model on the table and print its coefficients and leave-one-source-out error per method."""
    from ..acceptance import fit as acceptance
    f = acceptance.fit()
    if write:
        click.echo(f"wrote {acceptance.write_fit(f)}", err=True)
    rep = acceptance.report(f)
    click.echo(json.dumps(rep, indent=2) if as_json else acceptance.format_report(rep))


@click.command("validate", short_help="Model vs public measurements (calibration).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (rows, summary, fitted values).")
def validate_cmd(as_json):
    """Predicted vs measured for every row of hardware_db/measurements (docs/calibration.md)."""
    from ..validation import comparison
    rep = comparison.report()
    click.echo(json.dumps(rep, indent=2) if as_json else comparison.format_report(rep))
