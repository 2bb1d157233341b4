"""What every benchmark here times the same way (scripts in this folder import it by name)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def interleaved(steps: dict[str, Callable[[], float]], reps: int, warmup: int = 1) -> dict[str, float]:
    """The median seconds of each step, the steps taking turns (``reps`` rounds, after ``warmup`` calls of
    each): a shared, noisy machine slows every candidate alike, so their ratio holds where a time does not.
    Each step times itself and returns its seconds (a CUDA step synchronizes first)."""
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(reps):
        for k, fn in steps.items():
            times[k].append(fn())
    return {k: statistics.median(v) for k, v in times.items()}
