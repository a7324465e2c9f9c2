"""Arrow arrays from numpy buffers, for writers that must not import pandas.

``pyarrow.array()`` and ``pyarrow.scalar()`` import pandas on first use (pyarrow's pandas shim,
~0.4 s); ``Array.from_buffers`` and ``take`` do not, so ``dse sweep`` builds its tables here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def validity_buffer(valid) -> pa.Buffer | None:
    return None if valid is None else pa.py_buffer(np.packbits(np.asarray(valid, dtype=bool), bitorder="little"))


def num_array(values, typ: pa.DataType, valid=None) -> pa.Array:
    """A fixed-width numeric (or timestamp) array over a numpy buffer; ``valid`` False -> null."""
    dtype = np.float64 if pa.types.is_floating(typ) else np.int32 if typ == pa.int32() else np.int64
    a = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(typ, a.size, [validity_buffer(valid), pa.py_buffer(a)])


def bool_array(values, valid=None) -> pa.Array:
    a = np.asarray(values, dtype=bool)
    return pa.Array.from_buffers(pa.bool_(), a.size, [validity_buffer(valid), pa.py_buffer(np.packbits(a, bitorder="little"))])


def string_array(values) -> pa.Array:
    """A string array of a few values (offsets and UTF-8 bytes built here)."""
    enc = [str(v).encode() for v in np.asarray(values, dtype=object).tolist()]
    offsets = np.zeros(len(enc) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(e) for e in enc])
    return pa.Array.from_buffers(pa.string(), len(enc), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(enc))])


def repeat_string(text: str, n: int) -> pa.Array:
    """``text`` n times: offsets 0, L, 2L, ... over the bytes repeated (no take)."""
    enc = str(text).encode()
    if n * len(enc) >= 2 ** 31:         # beyond int32 offsets: Arrow's own take says so
        return string_array([text]).take(num_array(np.zeros(n, dtype=np.int64), pa.int64()))
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(enc))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(enc * n)])


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indices, distinct values as str) of a text column; one value repeated (a chain drafter's
    empty tree_shape) without a sort."""
    a = np.asarray(values)
    if a.size and a.ndim == 1 and bool((a == a[0]).all()):
        return np.zeros(a.size, dtype=np.int64), np.array([str(a[0])])
    distinct, idx = np.unique(np.asarray(values).astype(str), return_inverse=True)
    return idx.reshape(-1), distinct
