"""A sweep's results table as a file: one row per trial (a setting at one seed), its columns, writing and
reading it (Parquet and CSV), and the pretraining runs' evaluation curves (``curves.parquet``): the schema the
running side writes and the reading side reads (``slm.analysis``: what the rows say). The table as TensorBoard
HParams sessions and MLflow runs is the running side's (``slm.tune.tracking``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from slm import methods
from slm.artifacts import atomic_path
from slm.layout import RunLayout, Snapshot, branch_name
from slm.records.plan import PretrainRun, Trial

# A sweep's result beside its report: what a study part commits (benchmarks/study_part.py) and what
# `slm report --tables` combines.
SWEEP_TABLES = ("results.parquet", "results.csv", "curves.parquet", "plan.json")

COLUMNS = ["method", "size", "expert", "params", "inference_flops_per_token", "pretrain_steps", "pretrain_flops",
           "pretrain_device_seconds", "generic_flops", "generic_device_seconds", "domain", "domain_tokens",
           "specialize_steps", "specialize_flops", "specialize_device_seconds", "per_domain_flops",
           "per_domain_device_seconds", "perplexity", "accuracy", "perplexity_before", "accuracy_before",
           "eval_loss_se", "setting", "seed", "trial"]
# Where a trial ran: the Ray node of its pretraining run (the trunk's) and of its specialization (issue 66). Not
# what a trial measured: a table compared with another run's leaves them out (``MEASURED``), and tables written
# before them have none.
PLACEMENT = ["pretrained_on", "specialized_on"]


def finite(x) -> bool:
    return x is not None and math.isfinite(x)


def row(t: Trial, m: dict, snapshot: Snapshot, teacher: dict | None = None,
        teacher_snapshot: Snapshot | None = None, pretrained_on: str | None = None) -> dict:
    """A trial's line of the results table: ``m`` its specialization's manifest, ``snapshot`` the one it
    started from. A distilled student's costs include its teacher's (``teacher``: the teacher's
    specialization manifest, ``teacher_snapshot``: what the teacher started from): the large model's
    pretraining is generic (paid once), its specialization per domain."""
    spec = m["cost"]
    # SLM-is: C_generic = 0, all of it per domain (a distilled student is the generic model's)
    domain_specific = t.method != methods.DISTILLED and methods.get(t.method).per_domain
    pre_flops, pre_seconds = snapshot.flops, snapshot.device_seconds
    spec_flops, spec_seconds = spec["flops"], spec["device_seconds"]
    if teacher is not None:
        pre_flops, pre_seconds = pre_flops + teacher_snapshot.flops, pre_seconds + teacher_snapshot.device_seconds
        spec_flops += teacher["cost"]["flops"]
        spec_seconds += teacher["cost"]["device_seconds"]
    d = t.domain
    setting = asdict(t.as_setting())
    # each axis and each method's own setting a column under its config key (sweep.axes, sweep.per_method)
    axes = dict(setting.pop("axes")) | dict(setting.pop("own"))
    return {
        "trial": t.name, "seed": t.seed, **setting, **axes,  # the setting's columns, as the plan names them
        "params": m["params"], "inference_flops_per_token": m["inference_flops_per_token"],
        "pretrain_flops": pre_flops, "pretrain_device_seconds": pre_seconds,
        "generic_flops": 0.0 if domain_specific else pre_flops,
        "generic_device_seconds": 0.0 if domain_specific else pre_seconds,
        "specialize_flops": spec_flops, "specialize_device_seconds": spec_seconds,
        "per_domain_flops": spec_flops + (pre_flops if domain_specific else 0.0),
        "per_domain_device_seconds": spec_seconds + (pre_seconds if domain_specific else 0.0),
        "perplexity": m["eval"][d]["perplexity"], "accuracy": m["eval"][d]["accuracy"],
        "perplexity_before": m["eval_before"][d]["perplexity"], "accuracy_before": m["eval_before"][d]["accuracy"],
        # the measure's own noise: the standard error of the mean loss from sampling the valid rows
        "eval_loss_se": m["eval"][d]["loss_se"],
        # what a scheduler compares (ASHA's intermediate reports carry the training loss at "step")
        "loss": m["eval"][d]["loss"], "step": t.specialize_steps,
        "pretrained_on": pretrained_on, "specialized_on": m.get("ran", {}).get("node"),
    }


def axis_columns(rows: list[dict]) -> list[str]:
    """The columns of a table's axes and own settings (``sweep.axes``, ``sweep.per_method``): named by their config
    keys, the only dotted columns."""
    return sorted({k for r in rows for k in r if "." in k})


def write_table(rows: list[dict], out: Path) -> Path:
    axes = axis_columns(rows)  # a row without an axis's value (a table of several sweeps): null there
    placed = [k for k in PLACEMENT if any(r.get(k) is not None for r in rows)]
    table = pa.Table.from_pylist([{**{k: r[k] for k in COLUMNS}, **{k: r.get(k) for k in axes},
                                   **{k: r.get(k) for k in placed}}
                                  for r in sorted(rows, key=lambda r: r["trial"])])
    with atomic_path(out / "results.parquet") as tmp:
        pq.write_table(table, tmp)
    with atomic_path(out / "results.csv") as tmp:
        pacsv.write_csv(table, tmp)
    return out / "results.parquet"


def add_columns(sweep: str | Path, values: dict[str, dict[str, float]]) -> Path:
    """Measurements made after a sweep (``slm eval --sweep``: lm-evaluation-harness's numbers) as columns
    of its results table, by trial name; a trial without one gets null; the table is rewritten atomically
    (Parquet and CSV). Every other column is left as it was."""
    path = Path(sweep) / "results.parquet"
    table = pq.read_table(path)
    trials = table.column("trial").to_pylist()
    unknown = sorted(set(values) - set(trials))
    if unknown:
        raise ValueError(f"{path}: no trial {unknown[0]!r} in the results table")
    for name in sorted({c for v in values.values() for c in v}):
        column = [values.get(t, {}).get(name, table.column(name)[i].as_py() if name in table.column_names else None)
                  for i, t in enumerate(trials)]
        array = pa.array(column, pa.float64())
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, array)
        else:
            table = table.append_column(name, array)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    with atomic_path(path.with_suffix(".csv")) as tmp:
        pacsv.write_csv(table, tmp)
    return path


def read_table(sweep: str | Path) -> list[dict]:
    """A sweep's rows. A table written before the seed axis has no ``setting`` / ``seed`` columns: each of
    its trials is its own setting, at an unrecorded seed."""
    path = Path(sweep)
    path = path / "results.parquet" if path.is_dir() else path
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run `slm sweep` first (or give the sweep folder)")
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        if "setting" not in r:
            r["setting"], r["seed"] = r["trial"], None
        r.setdefault("expert", None)  # tables written before the C6 experiment
        r.setdefault("eval_loss_se", None)  # before issue 28's evaluation sample
    return rows


def write_curves(runs: tuple[PretrainRun, ...], layout: RunLayout, out: Path) -> Path:
    """Every evaluation the pretraining runs logged (``metrics.jsonl`` rows with ``eval.macro.*``: the
    macro average over the valid domains of the model each domain is served by), a row each, in
    ``curves.parquet``: how each run's valid loss fell with its steps (C5, the saturation check). A WSD
    run's cooldown branches add their final evaluation each (run ``<run>@<budget>``, role ``branch``): the
    loss of every fully trained budget, which the report fits for the saturation."""
    rows = []
    for run in (r for r in runs if r.owned):  # a run a part trained only as a dependency: its owner's curve
        output = layout.pretrained(run.name)
        logs = [(run.name, run.role, output.metrics, None)] + [
            (branch_name(run.name, b), "branch", output.branch(b).metrics, b) for b in run.branches]
        for name, role, log, final in logs:
            seen: dict[int, dict] = {}  # a resumed run logs the steps after its checkpoint twice: keep the last
            for line in log.read_text().splitlines() if log.exists() else []:
                m = json.loads(line)
                if "eval.macro.loss" in m and (final is None or m["step"] == final):
                    seen[m["step"]] = m
            for step, m in sorted(seen.items()):
                rows.append({"run": name, "role": role, "method": run.method, "size": run.size,
                             "seed": run.seed, "step": step, "tokens": m["tokens"], "flops": m["flops"],
                             "loss": m["eval.macro.loss"], "perplexity": m["eval.macro.perplexity"],
                             "accuracy": m["eval.macro.accuracy"],
                             # a run pretrained for one domain (SLM-is): its loss there, what it is trained for
                             "domain_loss": m.get(f"eval.{run.domain}.loss") if run.domain else None})
    return write_curve_rows(rows, out / "curves.parquet")


CURVE_SCHEMA = pa.schema([(c, pa.string()) for c in ("run", "role", "method", "size")] + [
    ("seed", pa.int64()), ("step", pa.int64()), ("tokens", pa.int64()), ("flops", pa.float64()),
    ("loss", pa.float64()), ("perplexity", pa.float64()), ("accuracy", pa.float64())])


def write_curve_rows(rows: list[dict], path: Path) -> Path:
    """A curves table (temp, then rename), a row per (run, step): the first of any repeats. ``domain_loss``
    is a column only where a run has one (tables written before it, and sweeps without a per-domain run,
    keep their schema)."""
    rows = list({(r["run"], r["step"]): r for r in reversed(rows)}.values())[::-1]
    schema = CURVE_SCHEMA
    if any(r.get("domain_loss") is not None for r in rows):
        schema = schema.append(pa.field("domain_loss", pa.float64()))
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pylist(sorted(rows, key=lambda r: (r["run"], r["step"])), schema=schema), tmp)
    return path


def read_curves(sweep: str | Path) -> list[dict]:
    """A sweep's curves table (empty for a sweep that wrote none)."""
    path = Path(sweep) / "curves.parquet"
    return pq.read_table(path).to_pylist() if path.exists() else []
