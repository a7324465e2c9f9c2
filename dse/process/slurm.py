"""Where this process sits in a SLURM job array: its task index and the array's size."""

from __future__ import annotations

import os

from ..errors import SpecError


def shard_from_env() -> tuple[int, int] | None:
    """(I, N) from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT (offset by SLURM_ARRAY_TASK_MIN)."""
    tid, cnt = os.environ.get("SLURM_ARRAY_TASK_ID"), os.environ.get("SLURM_ARRAY_TASK_COUNT")
    if tid is None or cnt is None:
        return None
    try:
        i, n = int(tid) - int(os.environ.get("SLURM_ARRAY_TASK_MIN", "0")), int(cnt)
    except ValueError:
        raise SpecError(None, "SLURM_ARRAY_TASK_ID", tid, "expected integers in the SLURM array variables") from None
    return i, n
