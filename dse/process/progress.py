"""Progress and notes on stderr: a redrawn bar on a terminal, plain lines in a log.

On a terminal one line is redrawn with a carriage return. Anywhere else (a SLURM log, a pipe)
each update is its own line, at most one every ``every_s`` seconds (and the last one), so logs
stay readable. Both show the rate since start and the ETA = remaining / rate.

A closed or broken stream (``dse run ... 2>&1 | head`` after head has exited) never stops the
work: :func:`note` and the bar drop what they cannot write and the run goes on to write its results.
"""

from __future__ import annotations

import sys
import time

#: what writing to a stream whose reader has gone raises: EPIPE (BrokenPipeError), a closed
#: file (ValueError), any other OSError of the stream
_DEAD_STREAM = (OSError, ValueError)


def write(stream, text: str) -> bool:
    """Write and flush ``text``; False (and nothing raised) when the stream is gone."""
    if stream is None:
        return False
    try:
        stream.write(text)
        stream.flush()
        return True
    except _DEAD_STREAM:
        return False


def note(text: str, stream=None) -> None:
    """One line on stderr (or ``stream``), dropped if the stream is closed or its pipe broken."""
    write(stream if stream is not None else sys.stderr, text.rstrip("\n") + "\n")


def eta_text(seconds: float) -> str:
    """'42 s', '7 min', '3.5 h'."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """``Progress(total, done, unit, label)``; ``update(n)`` after each batch; ``close()``."""

    def __init__(self, total: int, done: int = 0, *, unit: str = "trials", label: str = "dse",
                 enabled: bool = True, stream=None, every_s: float = 5.0, clock=time.monotonic):
        self.total, self.done, self.unit, self.label = total, done, unit, label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.every_s, self.clock = every_s, clock
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = clock()
        self.first = done
        self.last_line = None
        self.printed = None
        self._draw(force=True)

    def text(self) -> str:
        elapsed = self.clock() - self.start
        new = self.done - self.first
        rate = new / elapsed if elapsed > 0 and new > 0 else float("nan")
        left = max(self.total - self.done, 0)
        rate_s = f"{rate:,.0f} {self.unit}/s" if rate == rate else f"- {self.unit}/s"
        eta = eta_text(left / rate) if rate == rate and rate > 0 else "?"
        pct = 100.0 * self.done / max(self.total, 1)
        return f"[{self.label}] {self.done}/{self.total} {self.unit} ({pct:.0f}%), {rate_s}, ETA {eta}"

    def _draw(self, force: bool = False):
        if not self.enabled:
            return
        now = self.clock()
        if self.tty:
            ok = write(self.stream, "\r" + self.text() + "\033[K")
        elif force or self.last_line is None or now - self.last_line >= self.every_s:
            ok = write(self.stream, self.text() + "\n")
            self.last_line = now
            self.printed = self.done
        else:
            return
        if not ok:              # nobody reads the progress any more: drop it, keep working
            self.enabled = False

    def update(self, n: int):
        self.done += n
        self._draw(force=self.done >= self.total)

    def close(self):
        """End the bar's line on a terminal; in a log, print the last state if not yet shown."""
        if not self.enabled:
            return
        if self.tty:
            write(self.stream, "\n")
        elif self.printed != self.done:
            write(self.stream, self.text() + "\n")
