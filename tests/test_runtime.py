"""slm.runtime: what a stage's peak memory measures."""

import subprocess
import sys

import numpy as np

from slm.runtime import PeakMemory


def test_peak_memory_sees_what_the_process_and_its_children_hold():
    with PeakMemory(interval_s=0.05) as idle:
        pass
    with PeakMemory(interval_s=0.05) as mem:
        block = np.ones(64 * 2**20)  # 512 MiB in this process, touched
        child = subprocess.Popen([sys.executable, "-c", "import numpy, time; a = numpy.ones(32 * 2**20); time.sleep(1)"])
        child.wait()
        del block
    assert mem.peak_bytes - idle.peak_bytes > (512 + 200) * 2**20, (mem.peak_gib, idle.peak_gib)
