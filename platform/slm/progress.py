"""Progress of a long stage in its log: ``[embed] 1,234/5,678 documents (22%), 41/s, ETA 1 min 48 s``.

A stage that knows how much work it has (documents to embed, windows to assign, packages to download)
counts what is done and prints a line at most every ``every_s`` seconds, and one at the end if it printed
any: a log is read later, so the lines are plain text, never a bar redrawn with carriage returns. Where
the work runs in Ray actors rather than on the driver, they add to a ``Counter`` actor (Ray's own idiom for
progress across tasks, the ``ProgressActor`` of its Monte Carlo example) that the driver polls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from slm.log import logger

log = logger(__name__)


def duration(seconds: float) -> str:
    """``2 h 05 min``, ``3 min 20 s``, ``12 s``."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


class Progress:
    """``done`` of ``total`` units of one stage's work, its rate and the time left, printed every ``every_s``.

    The rate behind the ETA is measured from the first unit done, not from the start: a stage's start-up
    (actors loading a model, a pool warming up) is not its pace — an embedding's first ETA read "1 h 06 min"
    for a stage that took 3.5 min. The ETA is said once a tenth of the work is done (``ETA after 10%``
    before) and the first unit has a quarter of the elapsed time behind it (``ETA once the pace is
    measured`` until then)."""

    def __init__(self, tag: str, unit: str, total: int, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, out: Callable[[str], None] | None = None):
        self.tag, self.unit, self.total, self.every_s, self.clock = tag, unit, total, every_s, clock
        self.out = out or log.info
        self.done, self.started = 0, clock()
        self.printed_at: float | None = None
        self.printed_done = 0  # the count the last line said
        # When the count reached the total: the rate and "in …" are the work's, not the stage's (which
        # goes on, a sort and a write after the last window is tokenized).
        self.finished_at: float | None = None
        self.first: tuple[float, int] | None = None  # (when, how many) at the first update with work done

    def line(self) -> str:
        now = self.finished_at if self.finished_at is not None else self.clock()
        elapsed = now - self.started
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        text = f"[{self.tag}] {self.done:,}/{self.total:,} {self.unit}{share}"
        if not self.done or elapsed <= 0:
            return text
        rate = self.done / elapsed
        text += f", {rate:.3g}/s" if rate >= 1 else f", {rate * 60:.3g}/min"
        if self.done >= self.total:
            return text + f", in {duration(elapsed)}"
        if self.done * 10 < self.total:
            return text + ", ETA after 10%"
        since, then = self.first or (self.started, 0)
        # the pace since the first unit, once it has a quarter of the elapsed time behind it (units that
        # finish together, two runs at once, would otherwise read as an instant pace)
        if now - since < elapsed / 4 or self.done <= then:
            return text + ", ETA once the pace is measured"
        return text + f", ETA {duration((self.total - self.done) * (now - since) / (self.done - then))}"

    def update(self, done: int) -> None:
        """The work done so far (a running total); prints when ``every_s`` has passed since the last line."""
        if done and self.first is None:
            self.first = (self.clock(), done)
        self.done = done
        now = self.clock()
        if done >= self.total and self.finished_at is None:
            self.finished_at = now
        if self.total <= 0:  # nothing to do (a fully pinned cluster stage): nothing to report
            return
        if now - (self.printed_at if self.printed_at is not None else self.started) >= self.every_s:
            self.printed_at, self.printed_done = now, done
            self.out(self.line())

    def add(self, n: int) -> None:
        self.update(self.done + n)

    def close(self) -> None:
        """The last line, when any was printed (a stage that took under ``every_s`` prints none) and the last
        one did not already say it."""
        if self.printed_at is not None and self.printed_done != self.done:
            self.printed_done = self.done
            self.out(self.line())


class RemoteProgress:
    """A ``Progress`` fed by Ray tasks and actors: ``with RemoteProgress(p) as counter:`` hands ``counter`` (a
    Ray actor handle; pass it to them, which call ``report(counter, n)``) while a driver thread polls it every
    few seconds and updates ``p``."""

    def __init__(self, progress: Progress, poll_s: float = 2.0):
        self.progress, self.poll_s = progress, poll_s
        self._stop = threading.Event()

    def __enter__(self):
        import ray  # the driver already runs Ray where this is used

        self.counter = ray.remote(num_cpus=0)(Counter).remote(self.progress.tag)
        self._thread = threading.Thread(target=self._poll, name=f"progress-{self.progress.tag}", daemon=True)
        self._thread.start()
        return self.counter

    def _poll(self) -> None:
        import ray

        while not self._stop.wait(self.poll_s):
            try:
                self.progress.update(ray.get(self.counter.value.remote(), timeout=10))
            except Exception:  # noqa: BLE001 (a missed poll only delays a progress line)
                continue

    def __exit__(self, *exc) -> None:
        import ray

        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            self.progress.update(ray.get(self.counter.value.remote()))
            self.progress.close()
        ray.kill(self.counter)


def report(counter, n: int) -> None:
    """From a Ray task or actor: ``n`` more units done. Waited for (a round trip per batch), so that when
    the stage's work has returned, its count is complete."""
    import ray

    ray.get(counter.add.remote(n))


class Counter:
    """The actor ``RemoteProgress`` polls: a running total that tasks and actors add to (``report``)."""

    def __init__(self, tag: str):
        self.tag, self.total = tag, 0

    def __repr__(self) -> str:  # the dashboard's and the log prefix's name for the actor
        return f"Progress({self.tag})"

    def add(self, n: int) -> None:
        self.total += n

    def value(self) -> int:
        return self.total
