"""``report``: the sweep's frontier plots, Markdown summary, claims and page."""

from __future__ import annotations

from pathlib import Path

from slm.job import JobConfig
from slm.log import logger
from slm.stages import stage

log = logger(__name__)


@stage("report")
def report(cfg: JobConfig, run_dir: Path) -> dict:
    """The sweep's frontier plots and Markdown summary, under its folder's report/."""
    from slm.analysis.report import report as write_report
    from slm.tune.sweep import sweep_dir

    result = write_report(sweep_dir(cfg))
    log.info(f"[report] {result['rows']} rows; plots {result['plots']} in {result['report']}")
    return result
