"""The workers of a shared study: which worker this process is, the trials a worker holds (its
record in the study, with its process), their heartbeats, whether a worker's process on this machine
has exited, and the failing of the RUNNING trials a dead or silent worker left behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..process.progress import note


def worker_index() -> int:
    """This process's index among the workers of a shared study: DSE_WORKER if set, else the
    SLURM task's place, SLURM_ARRAY_TASK_ID x SLURM_NTASKS + SLURM_PROCID (0 outside SLURM).
    Worker i > 0 samples with derive_seed(seed, i)."""
    def num(name: str, default: int) -> int:
        text = os.environ.get(name, "").strip()
        return int(text) if text.isdigit() else default
    if os.environ.get("DSE_WORKER", "").strip().isdigit():
        return num("DSE_WORKER", 0)
    return num("SLURM_ARRAY_TASK_ID", 0) * num("SLURM_NTASKS", 1) + num("SLURM_PROCID", 0)


def number_ranges(numbers) -> list[list[int]]:
    """Trial numbers as sorted inclusive [first, last] runs: [0, 1, 2, 5] -> [[0, 2], [5, 5]]."""
    out: list[list[int]] = []
    for x in sorted(set(int(v) for v in numbers)):
        if out and x == out[-1][1] + 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return out


def covers(record: dict, number: int) -> bool:
    """True when the worker ``record`` holds trial ``number``, or may (it is asking from a lower number)."""
    try:
        if record.get("asking_from") is not None and number >= int(record["asking_from"]):
            return True
        return any(int(lo) <= number <= int(hi) for lo, hi in record.get("trials") or [])
    except (TypeError, ValueError):
        return False


def last_sign_of_life(trial, records: list[dict], seen: dict, now: float) -> float:
    """Epoch seconds of a trial's last heartbeat: its ``dse_heartbeat`` user attribute, or the
    ``beat`` of a worker record that holds it. Never its start time: Optuna stores a naive local
    time of whichever process created the trial (the storage proxy's, in its own time zone), which
    no reader can place. A trial with neither is dated by when this process first saw it
    (``seen``: trial number -> epoch seconds, ``now`` when first seen)."""
    beats = [float(r["beat"]) for r in records if isinstance(r.get("beat"), (int, float)) and covers(r, trial.number)]
    beat = trial.user_attrs.get("dse_heartbeat")
    if isinstance(beat, (int, float)):
        beats.append(float(beat))
    return max(beats) if beats else seen.setdefault(trial.number, now)


def write_heartbeat(trials) -> None:
    """Set ``dse_heartbeat`` (epoch seconds) on trials this worker still holds."""
    from optuna.exceptions import UpdateFinishedTrialError
    now = time.time()
    for t in trials:
        try:
            t.set_user_attr("dse_heartbeat", now)
        except UpdateFinishedTrialError:
            pass


#: the study user attribute (one per worker run, + its id) naming the worker process and the trials it holds
WORKER_KEY = "dse_worker:"


def _start_ticks(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process ``pid`` from /proc, None off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _machine() -> str | None:
    """This machine and process namespace: hostname, kernel boot id and PID-namespace inode (two
    containers with one hostname are not one machine); None where they cannot be read."""
    import socket
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{socket.gethostname()}/{boot}/{ns}"


def worker_process() -> dict | None:
    """This worker's machine, PID and process start time, recorded with the trials it holds so
    that a worker on the same machine can tell when it has exited; None off Linux."""
    machine, me = _machine(), _start_ticks(os.getpid())
    return None if machine is None or me is None else {"machine": machine, "pid": os.getpid(), "start": me[1]}


def process_exited(record: dict) -> bool:
    """True when ``record`` (:func:`worker_process`) names a process on this machine that has
    exited: no such PID, a zombie, or the PID reused by a process started later."""
    if not isinstance(record, dict) or not record.get("machine") or record.get("machine") != _machine():
        return False
    try:
        pid = int(record["pid"])
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass                          # another user's process: it exists
    except (KeyError, TypeError, ValueError, OSError):
        return False
    now = _start_ticks(pid)
    return now is not None and (now[0] in ("Z", "X") or now[1] != record.get("start"))


def dead_workers_trials(ostudy, running: list, own_key: str | None = None) -> set[int]:
    """Numbers of the ``running`` trials held by worker processes on this machine that have
    exited: those in their records, and, for one killed while it asked a batch (before it could
    record the batch), every RUNNING trial from the number it started asking at, but only when no
    other worker (here or elsewhere, other than ``own_key``, this one) may be holding or asking
    trials: the resume after a SIGKILL of the only local worker. With other workers active, a
    trial of theirs could not be told from the dead one's; those wait for the heartbeat timeout."""
    held: dict[int, bool] = {}
    asking: list[int] = []
    others_active = False
    for key, rec in ostudy.user_attrs.items():
        if not key.startswith(WORKER_KEY) or key == own_key or not isinstance(rec, dict):
            continue
        dead = process_exited(rec)
        try:
            for lo, hi in rec.get("trials") or []:
                held.update((x, dead) for x in range(int(lo), int(hi) + 1))
            if rec.get("asking_from") is not None and dead:
                asking.append(int(rec["asking_from"]))
        except (TypeError, ValueError):
            continue
        others_active |= not dead and bool(rec.get("trials") or rec.get("asking_from") is not None)
    out = {n for n, dead in held.items() if dead}
    if asking and not others_active:
        out |= {t.number for t in running if t.number >= min(asking) and t.number not in held}
    return out & {t.number for t in running}


def fail_stale_trials(ostudy, timeout_s: float = 60.0, trials=None, now: float | None = None,
                      label: str = "dse run", own_key: str | None = None, seen: dict | None = None) -> int:
    """FAIL the RUNNING trials whose worker gave no sign of life for ``timeout_s`` seconds
    (:func:`last_sign_of_life`: killed; ask/tell runs no heartbeat thread; a batch here takes
    milliseconds to seconds and refreshes ``dse_heartbeat`` while it is told), and at once those
    whose worker process on this machine has exited (:func:`dead_workers_trials`); enqueue their
    parameters again, so their designs are re-asked. ``seen`` persists across calls (the first
    sight of trials no heartbeat dates). Returns how many were failed."""
    from optuna.trial import TrialState
    now = time.time() if now is None else now
    trials = ostudy.get_trials(deepcopy=False) if trials is None else trials
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if not running:
        return 0
    dead = dead_workers_trials(ostudy, running, own_key)
    records = [r for k, r in ostudy.user_attrs.items() if k.startswith(WORKER_KEY) and isinstance(r, dict)]
    seen = {} if seen is None else seen
    failed = exited = 0
    for t in running:
        gone = t.number in dead
        if not gone and now - last_sign_of_life(t, records, seen, now) <= timeout_s:
            continue
        try:
            ostudy.tell(t.number, state=TrialState.FAIL)
        except Exception:   # noqa: BLE001 - another worker failed or finished it first
            continue
        failed += 1
        exited += gone
        if t.params:
            ostudy.enqueue_trial(t.params, user_attrs={"dse_reasked": t.number})
    if exited:
        note(f"[{label}] {exited} RUNNING trials of a worker on this machine that has exited were failed at once "
             "and their designs asked again")
    return failed
