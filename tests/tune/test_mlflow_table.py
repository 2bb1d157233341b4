"""A sweep's results table in MLflow's compare view: one run per trial, its varying hparams as parameters
and the table's metrics (the committed quickstart sweep of issue 28 is the data)."""

from __future__ import annotations

import pyarrow.csv as pacsv

from slm.tune.tracking import write_mlflow
from tests.analysis.test_report_tables import SOURCE


def test_each_trial_is_one_run_with_its_setting_and_metrics_and_a_rerun_adds_none(tmp_path):
    from mlflow.tracking import MlflowClient

    rows = pacsv.read_csv(SOURCE / "results.csv").to_pylist()
    uri = (tmp_path / "mlruns").as_uri()
    experiment = write_mlflow(rows, uri, "slm: quickstart results")
    client = MlflowClient(uri)
    runs = {r.data.tags["slm.trial"]: r for r in client.search_runs([experiment], max_results=1000)}
    assert sorted(runs) == sorted(r["trial"] for r in rows)
    for r in rows:
        run = runs[r["trial"]]
        assert run.info.run_name == r["trial"] and run.info.status == "FINISHED"
        # what varies in this sweep (one size, one domain: not parameters), as TensorBoard's HParams
        assert run.data.params == {k: str(r[k]) for k in ("method", "pretrain_steps", "domain_tokens", "seed")}
        assert run.data.metrics["perplexity"] == r["perplexity"] and run.data.metrics["accuracy"] == r["accuracy"]
    assert write_mlflow(rows, uri, "slm: quickstart results") == experiment
    assert len(client.search_runs([experiment], max_results=1000)) == len(rows)
