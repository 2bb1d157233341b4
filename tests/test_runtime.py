"""slm.runtime: what a stage's peak memory measures."""

import subprocess
import sys


def test_peak_memory_sees_what_the_process_and_its_children_hold():
    # In a fresh process: this one may hold a local Ray whose workers come and go during the measurement.
    code = """
import subprocess, sys
import numpy as np
from slm.runtime import PeakMemory
with PeakMemory(interval_s=0.05) as idle:
    pass
with PeakMemory(interval_s=0.05) as mem:
    block = np.ones(64 * 2**20)  # 512 MiB in this process, touched
    child = subprocess.Popen([sys.executable, "-c", "import numpy, time; a = numpy.ones(32 * 2**20); time.sleep(1)"])
    child.wait()
    del block
print(mem.peak_bytes - idle.peak_bytes)
"""
    grown = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert grown > (512 + 200) * 2**20, grown / 2**30
