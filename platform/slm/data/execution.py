"""How the data stages have Ray Data execute their datasets: in a reproducible order.

Ray Data streams blocks out of an operator as they finish, so without ``preserve_order`` the cluster
assignments came back from a second run as the same rows in another order, and packing (which joins
windows in the order it reads them) then made other sequences from them (measured: issue 16). With it,
every operator is asked to hand its blocks on in its input's order. That is not a guarantee: in one of two
identical runs the cluster stage's actor pool still wrote one input file's blocks out of order (with
preserve_order on), so what follows the assignments must not depend on their row order — packing orders
each group's windows itself (``slm.data.pack``). A dataset captures the context when it is created, so
this is entered before the datasets are made.
"""

from __future__ import annotations

import contextlib
import sys

import pyarrow as pa
import ray
from ray.data.context import DataContext, ShuffleStrategy
from ray.util.debug import log_once

from slm.runtime import verbose


@contextlib.contextmanager
def reproducible_execution():
    """Blocks in their input's order, the sort-based shuffle, and quiet progress and warnings in logs.

    The shuffle: Ray 2.60's default (SHUFFLE_V2) failed on the full corpus's resampled sets, a reducer
    joining a block with no columns to real ones ("Schema at index 1 was different"); the sort-based
    one does not, and its reducers merge their inputs in a fixed order.

    Parquet reads: Ray 2.60's DataSourceV2 reader (the default, ray-project/ray#65273) lists files through a
    pool of ``FooterReader`` actors (32 by default) that ``FooterFileIndexer.list_files`` ends with
    ``ray.kill``: each read left dozens of actor-creation tasks marked FAILED (WORKER_DIED) in the
    dashboard of a job that succeeded (issue 46: "Failed: 89"). The V1 reader lists with plain tasks that
    finish; what a stage reads and writes is the same (every stage's output is a function of the rows,
    not of their block order: docs/budgets.md, "Reproducibility")."""
    context = DataContext.get_current()
    memory = context.issue_detectors_config.high_memory_detector_config
    saved = (context.shuffle_strategy, context.execution_options.preserve_order, context.enable_progress_bars,
             context.enable_operator_progress_bars, memory.detection_time_interval_s, context.use_datasource_v2)
    context.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    context.use_datasource_v2 = False
    context.execution_options.preserve_order = True
    # Progress: a bar on a terminal; in a log (where Ray Data writes every operator's state every 10 s,
    # most of a job's log) nothing but the stages' own lines, unless `slm -v`.
    context.enable_progress_bars = verbose() or sys.stdout.isatty()
    context.enable_operator_progress_bars = verbose()
    if not context.enable_progress_bars:  # spend Ray Data's once-per-process "Progress bars disabled" warning
        log_once("ray_data_progress_manager_disabled")
    # Ray Data's high-memory detector: a 15-line "Operator … uses 2.5GiB of memory per worker … consider
    # setting memory=…" every 30 s of a stage (60 of a cluster part's log lines a minute), about operators
    # (a repartition, the write) whose memory the stage does not set. Each stage measures and reports its own
    # peak memory (stage_resources.json); `slm -v` keeps the detector's figures.
    if not verbose():
        memory.detection_time_interval_s = -1
    try:
        yield
    finally:
        (context.shuffle_strategy, context.execution_options.preserve_order, context.enable_progress_bars,
         context.enable_operator_progress_bars, memory.detection_time_interval_s, context.use_datasource_v2) = saved


def grouped_sums(ds: ray.data.Dataset, keys: list[str], count: str, sums: dict[str, str]) -> list[dict]:
    """Per group of ``keys``: its rows (as ``count``) and the sums of the columns ``sums`` names (column →
    output name), one dict per group. Each block is grouped in its own task (a few rows out of each) and
    the partial sums are added here: no shuffle, so no hash-aggregator actors (issue 46: on a 2-CPU Ray their
    shutdown left a SIGABRT dump in stages that succeeded) for what is a few thousand numbers."""
    columns = list(sums)

    def block(batch: pa.Table) -> pa.Table:
        summed = batch.group_by(keys).aggregate([(columns[0], "count"), *((c, "sum") for c in columns)])
        names = {f"{columns[0]}_count": count, **{f"{c}_sum": out for c, out in sums.items()}}
        return summed.rename_columns([names.get(n, n) for n in summed.column_names]).select([*keys, count, *sums.values()])

    partial = pa.concat_tables(ray.get(ds.map_batches(block, batch_format="pyarrow").to_arrow_refs()),
                               promote_options="permissive")
    totals = partial.group_by(keys).aggregate([(name, "sum") for name in (count, *sums.values())])
    return totals.rename_columns({f"{name}_sum": name for name in (count, *sums.values())}).to_pylist()
