"""Claims among the workers of a shared study, made without a lock or a read-modify-write.

Each worker writes only its own study user attribute (a key with its run id) and then reads them
all. Of two workers that claim together, the one that reads second sees the other's claim (each
writes before it reads), on a journal file, a database or gRPC alike. Two uses:

- seeding (:func:`seed_once`): a worker seeds the study (sampler auto: dse.search.seeds) only when it
  sees no other live seeding claim; one that sees one withdraws and waits for the seeds
  (``dse_seeds``), or for the claim to go (its worker withdrew it, exited on this machine or gave
  no heartbeat for the timeout): at most one worker seeds, and an empty study is seeded once;
- asking (:func:`others_asking`): a worker about to ask new trials announces how many in its
  ``dse_worker:`` record (dse.search.workers) and counts what the others announced as taken, so
  workers racing for the last trials create no more than the study's total (none failed for
  being over it).
"""

from __future__ import annotations

import random
import time

from ..process.progress import note
from .workers import WORKER_KEY, process_exited

#: one seeding claim per worker run (+ its id): {machine, pid, start, beat}; beat None = withdrawn
SEED_KEY = "dse_seeding:"
#: the study user attribute the seeding worker writes once the seeds are enqueued (dse.search.seeds)
SEEDS_ATTR = "dse_seeds"
#: the longest pause between two looks at a study another worker is seeding
POLL_MAX_S = 2.0


def held(rec, now: float, timeout_s: float, stamp: str = "beat") -> bool:
    """A claim record still held: its ``stamp`` set and within ``timeout_s`` of ``now``, and its
    process not one on this machine that has exited."""
    if not isinstance(rec, dict) or rec.get(stamp) is None:
        return False
    try:
        fresh = now - float(rec[stamp]) <= timeout_s
    except (TypeError, ValueError):
        return False
    return fresh and not process_exited(rec)


def seeding_claims(attrs: dict, own_key: str | None, now: float, timeout_s: float) -> list[str]:
    """Keys of the live seeding claims of other workers."""
    return [k for k, rec in attrs.items() if k.startswith(SEED_KEY) and k != own_key and held(rec, now, timeout_s)]


def others_asking(attrs: dict, own_key: str | None, now: float, timeout_s: float) -> int:
    """Trials other workers announced they may create (``asking`` in their live ``dse_worker:``
    records): taken from the budget until their record says which trials they hold."""
    total = 0
    for key, rec in attrs.items():
        if key.startswith(WORKER_KEY) and key != own_key and held(rec, now, timeout_s, "asked_at"):
            try:
                total += max(int(rec.get("asking") or 0), 0)
            except (TypeError, ValueError):
                continue
    return total


class Beat:
    """Refreshes a claim's ``beat`` at most every ``every_s`` seconds; checks ``stop`` (a
    dse.process.interrupt.StopFlag) each time it is called."""

    def __init__(self, ostudy, key: str, record: dict, every_s: float, stop=None):
        self.ostudy, self.key, self.record, self.every_s, self.stop = ostudy, key, record, every_s, stop
        self.last = time.monotonic()

    def __call__(self) -> None:
        if self.stop is not None:
            self.stop.check()
        if time.monotonic() - self.last >= self.every_s:
            self.ostudy.set_user_attr(self.key, {**self.record, "beat": time.time()})
            self.last = time.monotonic()


def seed_once(ostudy, key: str, record: dict, seed, *, timeout_s: float, stop, label: str = "dse run",
              progress: bool = False, meanwhile=None) -> bool:
    """Run ``seed(beat)`` in one worker of a shared study: claim (write this worker's claim under
    ``key``, then read every claim), and seed only when no other live claim is seen; else
    withdraw and wait until the study has its seeds or the other claim goes (then claim again).
    ``beat`` refreshes the claim (call it often: dse.search.presearch calls it after each part)
    and raises KeyboardInterrupt once ``stop`` is set. ``meanwhile`` runs once while waiting (the
    sampler's own pre-search). Returns True when this worker seeded."""
    jitter = random.Random()            # only the timing of the retries: no result depends on it
    idle, said = 0, False
    withdrawn = {**record, "beat": None}
    while True:
        stop.check()
        attrs = ostudy.user_attrs
        if SEEDS_ATTR in attrs:
            return False
        if not seeding_claims(attrs, key, time.time(), timeout_s):
            ostudy.set_user_attr(key, {**record, "beat": time.time()})
            attrs = ostudy.user_attrs
            if SEEDS_ATTR not in attrs and not seeding_claims(attrs, key, time.time(), timeout_s):
                try:
                    return seed(Beat(ostudy, key, record, min(10.0, timeout_s / 3), stop))
                finally:
                    ostudy.set_user_attr(key, withdrawn)
            ostudy.set_user_attr(key, withdrawn)        # two claimed together: both step back, one retries first
            if SEEDS_ATTR in attrs:
                return False
        if progress and not said:
            note(f"[{label}] waiting for another worker to seed the study (its pre-search; taken over after "
                 f"{timeout_s:g} s without its heartbeat, or at once when its worker on this machine has exited)")
            said = True
        if meanwhile is not None:
            meanwhile()
            meanwhile = None
            continue
        time.sleep(min(POLL_MAX_S, 0.1 * 1.5 ** idle) * jitter.uniform(0.5, 1.5))
        idle += 1
