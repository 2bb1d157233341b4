"""A long stage's progress lines: n/N, rate and time left, at most every `every_s`, and fed by Ray actors."""

from __future__ import annotations

import pytest

from slm.progress import Progress, RemoteProgress, duration, report


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_come_every_interval_with_rate_and_time_left():
    clock, lines = Clock(), []
    p = Progress("embed", "documents", 1000, every_s=30, clock=clock, out=lines.append)
    clock.now = 10
    p.add(100)
    assert lines == []  # under the interval: quiet
    clock.now = 40
    p.add(300)  # 400 in 40 s: 10/s, 600 left
    assert lines == ["[embed] 400/1,000 documents (40%), 10/s, ETA 1 min 00 s"]
    clock.now = 50
    p.add(100)
    assert len(lines) == 1  # 10 s after the last line
    clock.now = 100
    p.update(1000)
    clock.now = 130  # the stage goes on after its last unit (a sort, a write)
    p.close()
    # said once, with the work's rate and time, not the stage's
    assert lines[1:] == ["[embed] 1,000/1,000 documents (100%), 10/s, in 1 min 40 s"]


def test_the_last_line_times_the_work_not_what_follows_it():
    clock, lines = Clock(), []
    p = Progress("pack", "windows", 100, every_s=30, clock=clock, out=lines.append)
    clock.now = 31
    p.update(50)
    clock.now = 40
    p.update(100)  # done at 40 s, under the interval since the last line: quiet
    clock.now = 59
    p.close()
    assert lines[1:] == ["[pack] 100/100 windows (100%), 2.5/s, in 40 s"]


def test_a_stage_shorter_than_the_interval_prints_nothing_and_slow_rates_read_per_minute():
    clock, lines = Clock(), []
    p = Progress("cluster", "windows", 10, every_s=30, clock=clock, out=lines.append)
    clock.now = 5
    p.add(10)
    p.close()
    assert lines == []
    q = Progress("corpus", "packages fetched", 20, every_s=10, clock=clock, out=lines.append)
    clock.now = 125
    q.add(1)
    assert lines == ["[corpus] 1/20 packages fetched (5%), 0.5/min, ETA after 10%"]
    assert [duration(s) for s in (12, 200, 7500)] == ["12 s", "3 min 20 s", "2 h 05 min"]
    nothing = Progress("cluster", "windows embedded", 0, every_s=0, clock=clock, out=lines.append)
    clock.now = 500
    nothing.update(0)
    nothing.close()
    assert len(lines) == 1  # a stage with nothing to do says nothing


def test_the_eta_is_the_pace_after_the_start_up_within_twice_the_truth_after_a_tenth():
    """Issue 46: an embedding's first ETA read "1 h 06 min" for a stage that took 3.5 min: the rate was
    measured from the start, over the actors' warm-up. A simulated stage: 60 s of start-up, then 10
    documents a second; every ETA said after the first tenth is within 2× of the time actually left."""
    clock, lines = Clock(), []
    p = Progress("embed", "documents", 2000, every_s=0, clock=clock, out=lines.append)
    said = []
    for t in range(61, 261):
        clock.now = float(t)
        p.update((t - 60) * 10)
        if "ETA " in lines[-1] and "ETA after" not in lines[-1] and "ETA once" not in lines[-1]:
            said.append((t, lines[-1]))
    truth = 260.0
    assert said and said[0][0] <= 90  # an ETA soon after the first tenth (t = 80)
    for t, line in said:
        eta = line.split("ETA ")[1]
        seconds = sum(int(n) * {"h": 3600, "min": 60, "s": 1}[u] for n, u in zip(eta.split()[::2], eta.split()[1::2],
                                                                              strict=True))
        assert (truth - t) / 2 <= seconds <= 2 * (truth - t), line
    # two units that finish together (two runs at once) do not read as an instant pace
    runs = Progress("sweep", "pretraining runs done", 8, every_s=0, clock=clock, out=lines.append)
    clock.now += 3600
    runs.update(1)
    clock.now += 1
    runs.update(2)
    assert lines[-1].endswith("ETA once the pace is measured")
    clock.now += 3600
    runs.update(4)
    assert "ETA 1 h" in lines[-1] or "ETA 2 h" in lines[-1]


@pytest.mark.ray
def test_ray_tasks_feed_the_driver_s_progress(ray_local):
    import ray

    lines = []

    @ray.remote(num_cpus=0.25)
    def work(counter, n):
        report(counter, n)
        return n

    progress = Progress("stats", "documents tokenized", 60, every_s=0, out=lines.append)
    with RemoteProgress(progress, poll_s=0.2) as counter:
        assert sum(ray.get([work.remote(counter, 10) for _ in range(6)])) == 60
    assert progress.done == 60 and lines[-1].startswith("[stats] 60/60 documents tokenized (100%)")
