"""dse results into a pandas DataFrame: :func:`load_results` (the public reader) over a
:class:`~.dataset.Dataset`, nullable bools and ints restored, is_pareto / pareto_rank global over
all parts. pandas is imported on the first call, not at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..errors import DseError
from .dataset import open_results

if TYPE_CHECKING:
    import pandas as pd


def restore_nullable(df: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """Without pandas metadata, null bools load as object and null ints as float: fix both."""
    import pandas as pd
    for field in schema:
        if field.name not in df.columns:
            continue
        col = df[field.name]
        if pa.types.is_boolean(field.type) and col.dtype == object:
            df[field.name] = col.astype("boolean")
        elif pa.types.is_integer(field.type) and pd.api.types.is_float_dtype(col.dtype):
            df[field.name] = col.astype("Int64")
    return df


def load_results(path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Read dse results (one Parquet file or a dataset directory) into a DataFrame.

    Args:
        path: a ``.parquet`` file, or a dataset directory: the parts its ``_manifest.json``
            lists (other files are not read, with a warning), or without a manifest its
            ``*.parquet`` files, searched recursively (names starting with ``_`` or ``.``,
            temp files, are skipped).
        columns: read only these columns (default: all), names or fnmatch patterns such as
            ``"params_*"`` (a pattern may match nothing); only they are decoded, so
            ``columns=["spec_ms_per_token", "cost_usd", "feasible"]`` of a 2M-row sweep takes
            tens of MB, not GB.

    In a dataset directory is_pareto / pareto_rank are global, over all parts: from the sweep's
    ``_pareto.parquet`` when it covers exactly these parts, else recomputed from the objective and
    feasible columns (a sweep's part files themselves hold them null). A sweep stores the front
    only, so ``pareto_rank`` past 0 is computed here, when it is read (non-dominated sorting of
    every feasible row: tens of seconds at millions of feasible rows; leave the column out when
    only the front matters).

    Returns:
        The rows of all part files, with ``df.attrs["dse"]`` set to the parsed ``b"dse"``
        metadata of the first file (in sorted path order).

    Raises:
        DseError: the path does not exist, holds no part files or several datasets, a file is
            not Parquet or lacks the ``b"dse"`` metadata or a column dse writes (or holds it
            as another type), part files belong to different studies or datasets, a trial is on
            two rows, or a requested column does not exist.
    """
    import pandas as pd  # here, not at import: `dse sweep` writes without pandas
    dataset = open_results(path)
    dataset.check_trials()
    root = dataset.root
    schema, meta = dataset.schema, dataset.meta
    flags = root.is_dir() and {"is_pareto", "pareto_rank"} <= set(schema.names) and dataset.objectives() is not None
    if columns is not None:
        import fnmatch
        pattern = [c for c in columns if any(ch in c for ch in "*?[")]
        columns = list(dict.fromkeys(
            n for c in columns for n in (fnmatch.filter(schema.names, c) if c in pattern else [c])))
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise DseError(f"{root}: no column(s) {', '.join(map(repr, missing))}; "
                           f"available: {', '.join(schema.names)}")
        flags = flags and bool({"is_pareto", "pareto_rank"} & set(columns))
    table = dataset.read(columns)
    df = restore_nullable(table.to_pandas(self_destruct=True, split_blocks=True), schema)  # frees as it goes
    del table
    if flags:
        got = dataset.global_flags(ranks="pareto_rank" in df.columns)
        if "is_pareto" in df.columns:
            df["is_pareto"] = pd.array(np.where(got.usable, got.is_pareto, None), dtype="boolean")
        if "pareto_rank" in df.columns:
            df["pareto_rank"] = pd.array(np.where(got.usable, got.ranks, None), dtype="Int64")
    df.attrs["dse"] = meta
    return df
