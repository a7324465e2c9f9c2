"""The commands that read results: `dse pareto` (the front of a results file or dataset, as a
table, JSON or CSV) and `dse report` (figures and an HTML page), and the printed front that
`dse run` ends with.
"""

from __future__ import annotations

import contextlib

import click

from ..errors import SpecError
from .commands import count_phrase, say


@click.command("pareto", short_help="The front of a results file or dataset.")
@click.argument("path", type=click.Path(exists=True))
@click.option("--objective", "objectives", multiple=True, metavar="METRIC:min|max",
              help="Objectives (default: the study's). Repeat for each.")
@click.option("--where", default=None,
              help="pandas query applied first (to the counts too), e.g. 'chips <= 2' [default: none].")
@click.option("--top", type=click.IntRange(min=1), default=None, help="Show the first N front rows [default: all].")
@click.option("--epsilon", default=None, metavar="E|METRIC=E,...",
              help="Leave out designs within E (relative) of a row shown in every objective, one E or one per "
                   "objective [default: 0.01 for the table, 0 (the exact front) for --json and --csv].")
@click.option("--wide", is_flag=True, help="Every column (default: objectives and the knobs that vary).")
@click.option("--per", default=None, metavar="KNOB",
              help="One front within each value of KNOB (e.g. batch: a larger batch trades latency for throughput, "
                   "so one front holds nearly every design) [default: one front].")
@click.option("--json", "as_json", is_flag=True, help="Print the front as JSON records.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the front as CSV.")
def pareto_cmd(path, objectives, where, top, epsilon, wide, per, as_json, as_csv):
    """The non-dominated front of a results file or sweep directory."""
    from .text import front_block
    objectives = list(objectives) or None
    script = as_json or as_csv
    eps = _parse_epsilon(epsilon, 0.0 if script else None)
    if per:
        _print_fronts_per(path, per, objectives, where, top, eps, wide, as_json, as_csv)
        return
    if not (where or script):    # no pandas: a sweep's front is read from its side file
        from ..results.front import dataset_front
        with _warnings_to_stderr():
            fr = dataset_front(path, objectives, top, epsilon=eps)
        _print_front_header(fr.points, fr.n_feasible, fr.n_designs, fr.n_rows, fr.objectives, fr.shown, fr.epsilon,
                            len(fr.rows), _rows_noun(fr.meta))
        if fr.points:
            columns = {c: fr.table[c].to_pylist() for c in fr.table.column_names}
            click.echo(front_block(columns, [m for m, _ in fr.objectives], _width(), wide))
            _print_per_batch_hint(fr.points, fr.n_feasible, columns.get("params_batch"))
        return
    from ..results.analysis import front_of, front_table, objectives_of
    from ..results.front import FRONT_TABLE_COLUMNS
    with _warnings_to_stderr():       # part by part: memory bounded by a part and the front
        fr = front_of(path, objectives, where=where, columns=FRONT_TABLE_COLUMNS)
    objs = objectives_of(fr, objectives)
    vec = epsilon_option(epsilon, 0.0 if script else None, objs)
    table = front_table(fr, objs, top=top, epsilon=vec)
    if as_json:
        click.echo(table.to_json(orient="records", indent=2))
    elif as_csv:
        click.echo(table.to_csv(index=False), nl=False)
    else:
        c = fr.attrs["counts"]
        shown = len(front_table(fr, objs, epsilon=vec)) if top is not None else len(table)
        _print_front_header(c["front"], c["feasible"], c["designs"], c["rows"], objs, shown, vec, len(table),
                            _rows_noun(fr.attrs["dse"]), where)
        if len(fr):
            columns = _frame_columns(table)
            click.echo(front_block(columns, [m for m, _ in objs], _width(), wide))
            _print_per_batch_hint(c["front"], c["feasible"], columns.get("params_batch"))


def _print_fronts_per(path, per, objectives, where, top, eps, wide, as_json, as_csv) -> None:
    """`dse pareto --per KNOB`: the front within each value of KNOB, one table ordered by KNOB (its
    column first), each value's front best first; --top applies to each value's front."""
    import pandas as pd

    from ..results.analysis import epsilon_of, front_table, fronts_per, objectives_of
    from ..results.front import FRONT_TABLE_COLUMNS
    from .text import counts_line, front_block, wrap
    with _warnings_to_stderr():
        fr = fronts_per(path, per, objectives, where=where, columns=FRONT_TABLE_COLUMNS)
    col, objs = fr.attrs["per"], objectives_of(fr, objectives)
    vec = epsilon_of(eps, objs)
    tables = [front_table(g, objs, top=top, epsilon=vec).assign(**{col: v}) for v, g in fr.groupby(col, sort=False)]
    table = pd.concat(tables, ignore_index=True) if tables else front_table(fr, objs)
    table = table[[col] + [c for c in table.columns if c != col]]
    if as_json or as_csv:
        click.echo(table.to_json(orient="records", indent=2) if as_json else table.to_csv(index=False),
                   nl=bool(as_json))
        return
    c, what = fr.attrs["counts"], ", ".join(f"{m} {d}" for m, d in objs)
    filt = f" where {where}" if where else ""
    click.echo(wrap(f"fronts per {col} ({fr.attrs['per_values']} values){filt}: "
                    f"{counts_line(c['front'], c['feasible'], c['designs'], c['rows'], _rows_noun(fr.attrs['dse']))}"
                    f"; {what}; {len(table):,} rows shown", _width()))
    if len(table):
        click.echo(front_block(_frame_columns(table), [col] + [m for m, _ in objs], _width(), wide))


#: the share of the feasible designs on one front above which a batch knob gets the --per hint
CROWDED_FRONT = 0.5


def _print_per_batch_hint(points: int, feasible: int, batch_values) -> None:
    """A note when batch varies along the front and the front holds most feasible designs: a larger
    batch trades latency for throughput, so the one front says little; fronts per batch compare."""
    if not batch_values or len(set(batch_values)) < 2 or points <= CROWDED_FRONT * feasible:
        return
    say(f"note: {points:,} of {feasible:,} feasible designs are on the front because batch is a knob (a larger "
        "batch trades latency per token for throughput); compare designs at each batch with --per batch")


def _parse_epsilon(text: str | None, default):
    """--epsilon: None -> ``default`` (None: the display default); 'E' -> E; 'METRIC=E,...' -> a dict;
    every E in [0, 1), else SpecError naming the flag (before any work)."""
    from ..results.pareto import DISPLAY_EPSILON
    if text is None:
        return DISPLAY_EPSILON if default is None else default
    try:
        if "=" in text:
            parsed = {k.strip(): float(v) for k, _, v in (item.partition("=") for item in text.split(",") if item.strip())}
            values = list(parsed.values())
        else:
            parsed = float(text)
            values = [parsed]
    except ValueError:
        values = []
    if not values or not all(0.0 <= e < 1.0 for e in values):        # NaN and inf fail the comparison
        raise SpecError(None, "--epsilon", text, "expected a relative epsilon E in [0, 1), or METRIC=E,... "
                        "per objective")
    return parsed


def epsilon_option(text: str | None, default, objs):
    """--epsilon as one relative epsilon per objective of ``objs`` (:func:`_parse_epsilon`); a metric
    that is not an objective is refused naming the flag."""
    from ..errors import DseError
    from ..results.front import epsilon_of
    parsed = _parse_epsilon(text, default)
    try:
        return epsilon_of(parsed, objs)
    except DseError as exc:
        raise SpecError(None, "--epsilon", text, str(exc)) from None


def _frame_columns(df) -> dict[str, list]:
    """A DataFrame's columns as lists of Python values, None for NA (for cli_text.front_block)."""
    import pandas as pd
    return {c: [None if pd.isna(v) else v for v in df[c].tolist()] for c in df.columns}


def _rows_noun(meta: dict | None) -> str:
    """'grid points' for a sweep's results, else 'trials'."""
    return "grid points" if (meta or {}).get("sampler") == "grid" else "trials"


def _width() -> int:
    from .text import terminal_width
    return terminal_width()


def _print_front_header(points: int, feasible: int, designs: int, rows: int, objs, shown: int, epsilon,
                        listed: int, rows_noun: str = "trials", where: str | None = None) -> None:
    """The header of a printed front: the counts (dse.results.analysis.counts: of the rows ``where`` keeps),
    the objectives, and how many rows the epsilon and --top leave, wrapped to the table's width."""
    from .text import counts_line, epsilon_note, wrap
    what = ", ".join(f"{m} {d}" for m, d in objs)
    filt = f" where {where}" if where else ""
    if not points:
        click.echo(wrap(f"no feasible design among {designs:,} designs{filt} ({what})", _width()))
        return
    more = f"; showing the first {listed}" if listed < shown else ""
    click.echo(wrap(f"{counts_line(points, feasible, designs, rows, rows_noun)}{filt}; {what}"
                    f"{epsilon_note(shown, points, epsilon)}{more}", _width()))


@click.command("report", short_help="PNG figures and an HTML page for results.")
@click.argument("path", type=click.Path(exists=True))
@click.option("--out", default=None,
              help="Output directory (default: <file>-report/ for a file, <dir>-dataset-report/ for a directory).")
@click.option("--force", is_flag=True, help="Write into --out even if it holds the report of another input.")
@click.option("--quiet", is_flag=True, help="No progress lines.")
def report_cmd(path, out, force, quiet):
    """PNG figures and a self-contained HTML page for a results file or dataset."""
    from ..report import build_report
    with _warnings_to_stderr():
        res = build_report(path, out=out, progress=not quiet, force=force)
    click.echo(f"{res['html']} ({count_phrase(len(res['figures']), 'figure')})")
    for name, why in res.get("skipped", []):
        click.echo(f"  not drawn: {name}: {why}")



@contextlib.contextmanager
def _warnings_to_stderr():
    """Warnings raised in the block, each as one `warning: ...` line on stderr."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                say(f"warning: {w.message}")


def print_front(df, study, header: str, rows: int = 25, epsilon=None, wide: bool = False):
    """The front, one line per design (the first trial found), sorted by the first objective, with
    near-ties within the display epsilon collapsed; a front longer than ``rows`` is shown at
    ``rows`` designs spread evenly along it. Counts as dse.results.analysis.counts (distinct designs).
    ``epsilon``: per objective (:func:`epsilon_option`, checked before the search); None: the display default."""
    import numpy as np

    from ..results.analysis import DISPLAY_EPSILON, counts, epsilon_of, front, front_table
    from .text import counts_line, epsilon_note, front_block, wrap
    objs = [(o.metric, o.direction) for o in study.objectives]
    eps = epsilon_of(DISPLAY_EPSILON if epsilon is None else epsilon, objs)
    c = counts(df, objs)
    width = _width()
    click.echo(wrap(header, width))
    if not c["front"]:
        click.echo(wrap(f"no feasible design among {c['designs']} designs ({', '.join(f'{m} {d}' for m, d in objs)})",
                        width))
        return
    fr = front(df, objs, epsilon=eps)
    pick = np.unique(np.linspace(0, len(fr) - 1, min(rows, len(fr))).round().astype(int))
    table = front_table(fr.iloc[pick], objs)
    dk = study.knob("draft")
    if dk is not None and dk.searched:
        given = study.drafts is not None and study.drafts.acceptance_given
        how = study.acceptance.describe() if given else "acceptance from the table or the model"
        acc = f"drafts {', '.join(dk.choices)} ({how}, task {study.workload.task.label})"
    else:
        src = study.workload.acceptance_source
        acc = (f"draft {study.drafter.label}, " + (study.acceptance.describe() if study.drafter.kind != "none"
                                                   else "no drafter")
               + (f" (from the {src.replace('+', ' and the ')})" if src in ("table", "model", "table+model") else ""))
    shown = f"showing {len(table)}, spread along it" if len(table) < len(fr) else "all shown"
    click.echo(wrap(f"{counts_line(c['front'], c['feasible'], c['designs'], c['rows'])}"
                    f"{epsilon_note(len(fr), c['front'], eps)}; {acc}; sorted by {objs[0][0]}, {shown}", width))
    click.echo(front_block(_frame_columns(table), [m for m, _ in objs], width, wide))
    _print_per_batch_hint(c["front"], c["feasible"], fr["params_batch"].tolist() if "params_batch" in fr else None)
