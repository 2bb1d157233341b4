"""``sweep.axes``: any setting of the pretrain or specialize sections crossed with a sweep's design (issue 63).

The plan crosses it and names every run and trial after its values; a specialize.* axis reuses the runs; the
dry run counts it; bad axes fail naming the key; and end to end on a real local Ray: each value a column of the
results table and a TensorBoard HParams dimension, the report grouped by it (axes.md, a report per value), and a
rerun with a value added trains only that value's runs."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pyarrow.parquet as pq
import pytest

from slm.config import ConfigError
from slm.job import load_job
from slm.records.plan import Plan
from slm.tune.sweep import plan_sweep, run_config, trial_config
from tests.conftest import noise, train_overrides


def spec(tmp_path, *extra):
    return load_job(None, [f"run.root={tmp_path}", "cluster.k=4", "sweep.methods=[generic, soup]", "sweep.sizes=[d1]",
                           "sweep.domains=[legal]", "sweep.pretrain_steps=[10, 20]", "sweep.domain_tokens=[1000]",
                           "sweep.specialize_steps=[5]", "sweep.seeds=[0, 1]", *extra])


def test_the_plan_crosses_each_axis_and_a_specialize_axis_reuses_the_runs(tmp_path):
    base = plan_sweep(spec(tmp_path), check_data=False)
    p = plan_sweep(spec(tmp_path, "sweep.axes={pretrain.train.optim.lr: [3e-3, 1e-2, 3.0e-2], "
                                  "specialize.train.optim.lr: [1e-3, 3e-3]}"), check_data=False)
    assert p.axes == ("pretrain.train.optim.lr", "specialize.train.optim.lr")
    assert len(p.runs) == 3 * len(base.runs) and len(p.trials) == 3 * 2 * len(base.trials)
    runs = {r.name: r for r in p.runs}
    # YAML reads 3e-3 as text: the plan has the key's type, and names say the value
    assert runs["generic-d1-pretrain-lr0.003-seed1"].axes == (("pretrain.train.optim.lr", 0.003),)
    trial = next(t for t in p.trials if t.name == "soup-d1-p10-t1000-s5-pretrain-lr0.03-specialize-lr0.001-seed0")
    assert trial.source == "soup-d1-pretrain-lr0.03-seed0" and trial.setting == trial.name.removesuffix("-seed0")
    assert dict(trial.axes) == {"pretrain.train.optim.lr": 0.03, "specialize.train.optim.lr": 0.001}
    assert {t.source for t in p.trials} == {r.name for r in p.runs}  # every run read, no run per specialize value
    # each run's and trial's job is the design's at its values; what the sweep set in the job itself (its runs'
    # folder, a path no user key may name) is kept as it is
    job = spec(tmp_path)
    job = replace(job, pretrain=replace(job.pretrain, output=str(tmp_path / "sweeps" / "lr" / "checkpoints")))
    assert run_config(job, runs["generic-d1-pretrain-lr0.003-seed1"]).pretrain.train.optim.lr == 0.003
    assert run_config(job, runs["generic-d1-pretrain-lr0.003-seed1"]).pretrain.train.seed == 1
    assert run_config(job, runs["generic-d1-pretrain-lr0.003-seed1"]).pretrain.output == job.pretrain.output
    t_job = trial_config(job, trial)
    assert (t_job.specialize.train.optim.lr, t_job.specialize.train.seed) == (0.001, 0)
    # plan.json keeps them; a plan without axes is written as before them
    assert Plan.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert "axes" not in json.dumps(base.to_json())
    # a method's own setting is an axis too; the study's parts name runs with their values
    soup = plan_sweep(spec(tmp_path, "sweep.axes={pretrain.model.soup.experts: [2, 4]}",
                           "sweep.part=[soup-d1-experts4]"), check_data=False)
    assert [r.name for r in soup.runs] == ["soup-d1-experts4-seed0", "soup-d1-experts4-seed1"]


def test_bad_axes_fail_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"'sweep.axes.pretrain.train.optim.learning_rate'.*unknown config key"):
        plan_sweep(spec(tmp_path, "sweep.axes={pretrain.train.optim.learning_rate: [1e-3]}"), check_data=False)
    with pytest.raises(ConfigError, match=r"'sweep.axes.pretrain.train.optim.lr'.*expected float"):
        plan_sweep(spec(tmp_path, "sweep.axes={pretrain.train.optim.lr: [fast]}"), check_data=False)
    with pytest.raises(ConfigError, match=r"'sweep.axes.pretrain.train.seed': the sweep sets it .* use sweep.seeds"):
        spec(tmp_path, "sweep.axes={pretrain.train.seed: [1, 2]}")
    with pytest.raises(ConfigError, match=r"'sweep.axes.pack.seq_len': an axis is a setting of pretrain or specialize"):
        spec(tmp_path, "sweep.axes={pack.seq_len: [64, 128]}")
    with pytest.raises(ConfigError, match="given twice"):
        plan_sweep(spec(tmp_path, "sweep.axes={pretrain.train.optim.lr: [1e-2, 0.01]}"), check_data=False)
    # the command line's dotted form is the same axis
    dotted = spec(tmp_path, "sweep.axes.pretrain.train.optim.lr=[1e-3, 1e-2]")
    assert dotted.sweep.axes == {"pretrain.train.optim.lr": ["1e-3", "1e-2"]}


SPEC = "jobs/sweeps/study.yaml"  # the first edition's spec at CI size, as tests/tune/test_sweep.py runs it


@pytest.mark.ray
def test_an_axis_runs_end_to_end_and_a_new_value_trains_only_its_runs(train_run, slm_cli):
    """A real sweep over a learning-rate axis: the table's column and HParams dimension, the report's grouping,
    pinned numerics recorded; then the same sweep with a third value trains only that value's runs and trials."""
    common = train_overrides(
        train_run, "sweep.methods=[generic]", "sweep.sizes=[tiny]", "sweep.large_size=", "sweep.distill=false",
        "sweep.salt_kd_share=0", "sweep.all_experts=false", "sweep.domains=[legal]", "resample.domains=[]",
        "sweep.pretrain_steps=[10, 20]", "sweep.domain_tokens=[3200]", "sweep.specialize_steps=[5]",
        "sweep.seeds=[0, 1]", "pretrain.train.num_workers=0", "specialize.train.num_workers=0",
        "pretrain.train.numerics=pinned", "specialize.train.numerics=pinned", "pretrain.train.checkpoint_every=0",
        "specialize.train.checkpoint_every=0", "ray.include_dashboard=false", "ray.num_cpus=2", "sweep.name=lr")
    dry = slm_cli("sweep", SPEC, "--dry-run", *common, "sweep.axes={pretrain.train.optim.lr: [3e-3, 1e-2]}").stdout
    assert "pretrain.train.optim.lr × 2 (0.003, 0.01)" in dry and "4 pretraining runs" in dry
    first = slm_cli("sweep", SPEC, *common, "sweep.axes={pretrain.train.optim.lr: [3e-3, 1e-2]}")
    assert noise(first.stdout + first.stderr) == {}
    sweep = train_run.run.dir / "sweeps" / "lr"
    rows = pq.read_table(sweep / "results.parquet").to_pylist()
    assert sorted((r["pretrain.train.optim.lr"], r["seed"]) for r in rows) == sorted(
        (lr, s) for lr in (0.003, 0.01) for s in (0, 1) for _ in (10, 20))
    assert "pretrain.train.optim.lr" in (sweep / "results.csv").read_text().splitlines()[0]
    plan = json.loads((sweep / "plan.json").read_text())
    assert plan["kernels"] == {"pretrain.train.numerics": "pinned 6a601b1f2020c66e",
                               "specialize.train.numerics": "pinned 6a601b1f2020c66e"}
    summary = json.loads((sweep / "checkpoints" / "generic-tiny-lr0.003-seed0" / "summary.json").read_text())
    assert summary["numerics"]["numerics"] == "pinned" and summary["numerics"]["aten"] == "AVX2"
    # TensorBoard's HParams: the axis is a dimension of every session
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(sweep / "tensorboard" / "hparams" / "generic-tiny-p20-t3200-s5-lr0.003-seed1"))
    events.Reload()
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        events.SummaryMetadata("_hparams_/experiment").plugin_data.content).experiment
    assert "pretrain.train.optim.lr" in [h.name for h in experiment.hparam_infos]
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.SummaryMetadata("_hparams_/session_start_info").plugin_data.content).session_start_info
    assert start.hparams["pretrain.train.optim.lr"].number_value == 0.003
    # the report: a report per value, and every setting side by side across the values
    axes = (sweep / "report" / "axes.md").read_text()
    assert "## pretrain.train.optim.lr" in axes and "| 0.003 | 0.01 |" in axes
    line = next(x for x in axes.splitlines() if x.startswith("| generic | tiny | legal | 20 |"))
    assert line.count("(n=2)") == 2 and line.count("**") == 2
    for value in ("lr0.003", "lr0.01"):
        assert (sweep / "report" / "at" / value / "report" / "claims.md").exists()
        assert (sweep / "report" / "at" / value / "report" / "report.html").exists()

    trained = {p.parent.name: p.stat().st_mtime_ns for p in (sweep / "checkpoints").glob("generic-*/model.safetensors")}
    again = slm_cli("sweep", SPEC, *common, "sweep.axes={pretrain.train.optim.lr: [3e-3, 1e-2, 3e-2]}").stdout
    assert len(trained) == 4
    for name, mtime in trained.items():  # the finished runs at 0.003 and 0.01 were not trained again
        assert (sweep / "checkpoints" / name / "model.safetensors").stat().st_mtime_ns == mtime, name
    assert re.search(r"\[sweep\] 6/6 pretraining runs done", again)
    rows = pq.read_table(sweep / "results.parquet").to_pylist()
    assert sorted({r["pretrain.train.optim.lr"] for r in rows}) == [0.003, 0.01, 0.03] and len(rows) == 12
