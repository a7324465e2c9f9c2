"""SIGTERM and SIGINT, handled alike: finish the batch in flight, write what is finished, stop.

SLURM pre-empts and ends jobs with SIGTERM; a terminal sends SIGINT. The first signal only
sets a flag that `dse run` and `dse sweep` check between batches (a batch takes milliseconds
to seconds) and the pre-search between its parts, so no write is cut in half; a second signal
raises KeyboardInterrupt at once.
Handlers are installed only in the main thread (Dask workers run tasks in other threads).
"""

from __future__ import annotations

import contextlib
import signal
import threading

#: exit status for a run stopped by a signal: 128 + the signal's number (143 SIGTERM, 130 SIGINT)
SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}


class StopFlag:
    """Set by the first SIGTERM/SIGINT; ``signum`` is the signal's number (0 while running)."""

    def __init__(self):
        self.signum = 0

    @property
    def requested(self) -> bool:
        return self.signum != 0

    @property
    def name(self) -> str:
        return SIGNAL_NAMES.get(self.signum, f"signal {self.signum}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def check(self) -> None:
        """Raise KeyboardInterrupt once a signal came: a long step (the pre-search) stops between parts."""
        if self.signum:
            raise KeyboardInterrupt

    def handler(self, signum, frame):
        if self.signum:                 # the second signal: stop now
            raise KeyboardInterrupt
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals():
    """Install the deferred SIGTERM/SIGINT handlers for the block; restore the old ones after."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    old = {s: signal.getsignal(s) for s in SIGNAL_NAMES}
    for s in SIGNAL_NAMES:
        signal.signal(s, flag.handler)
    try:
        yield flag
    finally:
        for s, h in old.items():
            signal.signal(s, h)
