"""The closing table every benchmark prints: each target, what was measured, PASS or FAIL."""

import sys


def report(results: list[tuple[str, str, str, bool]], width: int = 20) -> int:
    """Print the targets table; return the exit code (1 when a target was missed)."""
    print()
    print(f"{'target':<46}{'measured':>{width}}  {'wanted':<20}result")
    for name, got, want, ok in results:
        print(f"{name:<46}{got:>{width}}  {want:<20}{'PASS' if ok else 'FAIL'}")
    if not all(ok for *_, ok in results):
        print("FAIL: a target was missed", file=sys.stderr)
        return 1
    return 0
