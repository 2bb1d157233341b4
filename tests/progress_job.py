"""A driver whose Ray tasks report to a progress counter and which leaves as soon as they return: the
shape of a stage's end (a Ray Data task's last ``report`` just before the job finishes). Submitted to a
head node by tests/test_job_submission.py (issue 46: one such call was listed FAILED in a job that
succeeded)."""

from __future__ import annotations

import sys

import ray

from slm.progress import Progress, RemoteProgress, report
from slm.runtime import RayConfig, init_ray, shutdown_ray


@ray.remote(num_cpus=0)
def work(counter, n: int) -> int:
    report(counter, n)
    return n


def main(tasks: int) -> None:
    init_ray(RayConfig())  # RAY_ADDRESS: the head the job was submitted to
    with RemoteProgress(Progress("progress-job", "units", tasks)) as counter:
        done = sum(ray.get([work.remote(counter, 1) for _ in range(tasks)]))
    print(f"progress-job: {done} of {tasks} units reported")
    shutdown_ray()


if __name__ == "__main__":
    main(int(sys.argv[1]))
