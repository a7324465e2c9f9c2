"""Distinct rows: which rows of a batch have the same latency inputs (a 64-bit hash of their bits,
checked column by column), so the latency terms are evaluated once per distinct row and gathered."""

from __future__ import annotations

import dataclasses

import numpy as np

from .arrays import DesignBatch, HardwareArrays

#: HardwareArrays fields the latency terms do not read: the capacity check's, and the energy constants
#: latency.energy_metrics applies per design after the gather (busy power, power limit, J/FLOP)
NOT_LATENCY_INPUTS = ("capacity_bytes", "memory_reserve_fraction", "idle_w", "power_limit_w", "j_per_flop",
                      "attention_j_per_flop")


def latency_columns(batch: DesignBatch) -> list[np.ndarray]:
    """The per-design inputs of the latency terms: every DesignBatch field but NOT_LATENCY_INPUTS."""
    cols, groups = [], [batch.target] if batch.draft is batch.target else [batch.target, batch.draft]
    for hw in groups:
        cols += [getattr(hw, f.name) for f in dataclasses.fields(hw) if f.name not in NOT_LATENCY_INPUTS]
    cols += [getattr(batch, f.name) for f in dataclasses.fields(batch)
             if not isinstance(getattr(batch, f.name), HardwareArrays)]
    return cols


_MIX = np.uint64(0x9E3779B97F4A7C15)      # odd: multiplying by it is a bijection mod 2^64


def distinct_latency_rows(batch: DesignBatch) -> tuple[np.ndarray, np.ndarray] | None:
    """distinct_rows of the latency inputs (latency_columns)."""
    return distinct_rows(latency_columns(batch), batch.n)


def distinct_rows(columns: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(one row of each distinct row of ``columns`` (each of length n, or one value broadcast),
    inverse index), or None when the distinct rows are more than half the rows. Rows are keyed
    by a 64-bit hash of their bit patterns, then checked column by column: a hash collision
    means no dedupe, never a wrong row. Before the sort, the hash buckets in use (a lower bound
    on the distinct rows) let a batch of mostly distinct rows out at once."""
    h, used = np.zeros(n, dtype=np.uint64), []
    for c in columns:
        if c.strides == (0,):          # one value broadcast (arrays._as_arrays)
            continue
        c = np.ascontiguousarray(c)
        bits = c.view(np.uint64) if c.dtype.itemsize == 8 else c.astype(np.uint64)
        if bits.min() == bits.max():
            continue
        np.bitwise_xor(h, bits, out=h)
        np.multiply(h, _MIX, out=h)
        h ^= h >> np.uint64(29)
        used.append(bits)
    # exact early out before the sort: distinct rows >= distinct hashes >= hash buckets in use
    seen = np.zeros(1 << max(10, (8 * n - 1).bit_length()), dtype=bool)
    seen[(h & np.uint64(seen.size - 1)).astype(np.intp)] = True
    if 2 * np.count_nonzero(seen) > n:
        return None
    order = np.argsort(h)
    hs = h[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(hs[1:], hs[:-1], out=new[1:])
    m = int(np.count_nonzero(new))
    if 2 * m > n:
        return None
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    first = order[new]
    for bits in used:
        if not np.array_equal(np.take(np.take(bits, first), inverse), bits):
            return None
    return first, inverse
