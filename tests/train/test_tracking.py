"""Watching a run (issue 18): one TensorBoard writer per run under a short name, MLflow (a local file
store, read back with mlflow.search_runs) and W&B (offline) with the same standard tags, progress lines
against the budget and a summary at the end; none of it part of the run's hash."""

from __future__ import annotations

import contextlib
import io
import os

import pytest

from slm.job import load_job
from slm.train.trainer import pretrain
from tests.conftest import logged_rows, train_overrides

pytestmark = pytest.mark.ray  # the training data come from the data stages on a local Ray (train_run)

STEPS = ["pretrain.train.num_workers=0", "pretrain.train.budget.steps=20", "pretrain.train.log_every=5",
         "pretrain.train.eval_every=10", "pretrain.train.checkpoint_every=0", "pretrain.name=watched"]


@pytest.fixture(scope="module")
def watched(train_run, tmp_path_factory):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    cfg = load_job(None, train_overrides(train_run, *STEPS, "pretrain.train.loggers=[tensorboard, mlflow, wandb]",
                                         "pretrain.train.tracking.experiment=slm-tests"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        manifest = pretrain(cfg)
    return cfg, manifest, out.getvalue()


def test_progress_lines_say_where_the_run_is_in_its_budget_and_it_ends_with_a_summary(watched):
    cfg, manifest, log = watched
    lines = [ln for ln in log.splitlines() if ln.startswith("[train] watched ")]
    assert [ln.split(" | ")[0] for ln in lines[:4]] == [
        "[train] watched 5/20 steps (25%)", "[train] watched 10/20 steps (50%)",
        "[train] watched 15/20 steps (75%)", "[train] watched 20/20 steps (100%)"]
    assert "ETA " in lines[0] and "ETA " not in lines[3] and "valid ppl" in lines[3]
    done = next(ln for ln in log.splitlines() if ln.startswith("[train] watched done:"))
    assert "20 steps" in done and "stopped by steps" in done and manifest["model"] in done
    domains = sorted(d for d in manifest["eval"] if d != "macro")
    assert all(f"{d} {manifest['eval'][d]['perplexity']:.2f}" in done for d in domains) and "macro" not in done
    assert f"(mean over {', '.join(domains)})" in lines[3]  # the progress line says what its mean is over


def test_tensorboard_has_one_short_named_run_with_the_standard_tags(watched):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg, _, _ = watched
    root = cfg.run.dir / "tensorboard"
    runs = [p.parent.relative_to(root).as_posix() for p in root.rglob("events.out.tfevents.*")]
    assert runs.count("pretrain/watched") == 1  # one writer (other tests' runs share the run directory)
    events = EventAccumulator(str(root / "pretrain" / "watched")).Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "perf/mfu", "eval/legal/ppl", "eval/macro/ppl"} <= tags
    assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20]
    assert [e.step for e in events.Scalars("eval/legal/ppl")] == [0, 10, 20]  # from before the first step


def test_mlflow_lists_the_run_with_its_metrics_and_parameters(watched):
    import mlflow

    cfg, _, _ = watched
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri((cfg.run.dir / "mlruns").resolve().as_uri())
    runs = mlflow.search_runs(experiment_names=["slm-tests"], filter_string="tags.mlflow.runName = 'watched'")
    assert len(runs) == 1 and runs["status"][0] == "FINISHED"
    assert runs["params.method"][0] == "generic" and runs["params.budget.steps"][0] == "20"
    history = mlflow.MlflowClient().get_metric_history(runs["run_id"][0], "train/loss")
    logged = {r["step"]: r["loss"] for r in logged_rows(cfg.run.dir / "checkpoints" / "watched")}
    assert {m.step: m.value for m in history} == pytest.approx(logged)
    assert "metrics.eval/legal/ppl" in runs.columns


def test_wandb_writes_an_offline_run(watched):
    cfg, _, _ = watched
    logs = cfg.run.dir / "checkpoints" / "watched" / "logs"
    run_id = (logs / "wandb_run_id").read_text().strip()
    assert list((logs / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))


def test_loggers_are_not_part_of_the_run(watched, capsys):
    cfg, manifest, _ = watched
    again = load_job(None, train_overrides(cfg, *STEPS, "pretrain.train.loggers=[]"))
    assert pretrain(again)["config_hash"] == manifest["config_hash"]
    assert "complete and current" in capsys.readouterr().out
