"""A sweep's results table as TensorBoard HParams sessions and MLflow runs: one session or run per trial, its
setting's varying fields as hyperparameters and what it measured as metrics."""

from __future__ import annotations

import os
from pathlib import Path

from slm.artifacts import atomic_path
from slm.records.table import axis_columns, finite

# TensorBoard's HParams dashboard: one session per trial (a setting at one seed), its budgets and axes as
# hyperparameters (those that vary across the trials; -1: none, a trial without a seed or an expert)
# and what it measured as metrics.
HPARAMS = ["method", "size", "domain", "pretrain_steps", "domain_tokens", "specialize_steps", "seed", "expert",
           "params"]


HPARAM_METRICS = ["perplexity", "accuracy", "perplexity_before", "pretrain_flops", "specialize_flops",
                  "per_domain_flops"]


def varying_hparams(rows: list[dict]) -> list[str]:
    """The hyperparameters TensorBoard and MLflow show: the method, and the budgets and axes that vary across
    the trials (what is the same for every trial — one domain, no experts — would only crowd out what varies)."""
    return [k for k in HPARAMS + axis_columns(rows) if k == "method" or len({r[k] for r in rows}) > 1]


def write_hparams(rows: list[dict], logdir: Path) -> Path:
    """The results table as TensorBoard HParams sessions under ``logdir/hparams`` (made afresh, atomically):
    ``tensorboard --logdir <sweep>/tensorboard``, HParams tab, filters and sorts the trials by method and
    budgets, its parallel-coordinates view plots them against perplexity."""
    from torch.utils.tensorboard import SummaryWriter

    varying = varying_hparams(rows)
    # The seed is a label, not a quantity: as text it is a discrete column ("0", not 0.0000) and a filter.
    labels = {"seed"}
    discrete = {k: sorted({str(r[k]) if k in labels else r[k] for r in rows})
                for k in ["method", "size", "domain", "seed"] + [a for a in axis_columns(rows)
                                                                 if any(isinstance(r[a], str) for r in rows)]
                if k in varying}
    with atomic_path(logdir / "hparams") as tmp, SummaryWriter(log_dir=str(tmp)) as writer:
        for r in sorted(rows, key=lambda r: r["trial"]):
            hparams = {k: -1 if r[k] is None else str(r[k]) if k in labels else r[k] for k in varying}
            metrics = {k: r[k] for k in HPARAM_METRICS if finite(r[k])}
            writer.add_hparams(hparams, metrics, hparam_domain_discrete=discrete, run_name=r["trial"])
    return logdir / "hparams"


def write_mlflow(rows: list[dict], tracking_uri: str, experiment: str) -> str:
    """The results table in MLflow: one run per trial in experiment ``experiment`` (its parameters the
    hparams that vary, as in TensorBoard's HParams; its metrics the table's), so that MLflow's compare
    view sorts and plots the sweep as the report does. A rerun updates the runs it made (found by their
    ``slm.trial`` tag) instead of adding copies. Returns the experiment's id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    if tracking_uri.startswith("file:"):  # as slm.train.callbacks.Trackers: MLflow 3's file store opt-in
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    known = {r.data.tags["slm.trial"]: r.info.run_id for r in
             client.search_runs([experiment_id], max_results=50_000) if "slm.trial" in r.data.tags}
    varying = varying_hparams(rows)
    for r in sorted(rows, key=lambda r: r["trial"]):
        run_id = known.get(r["trial"])
        if run_id is None:
            run_id = client.create_run(experiment_id, run_name=r["trial"], tags={"slm.trial": r["trial"]}).info.run_id
            client.log_batch(run_id, params=[mlflow.entities.Param(k, str(r[k])) for k in varying])
        client.log_batch(run_id, metrics=[mlflow.entities.Metric(k, float(r[k]), 0, 0)
                                          for k in HPARAM_METRICS if finite(r[k])])
        client.set_terminated(run_id)
    return experiment_id
