"""``sweep.per_method``: each method at its own settings (issue 63: each method at its own learning rate).

A method's runs train at its own ``pretrain.*`` settings and the trials that start from them carry those and
train at its own ``specialize.*`` ones; each is named after them and every reference follows the names; the
runs of methods not named keep their names (their finished runs stay current); the settings are the results
table's columns but not an axis the report splits by; bad settings fail naming the key."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow.parquet as pq
import pytest

from slm.config import ConfigError
from slm.job import load_job
from slm.records.plan import Plan
from slm.tune.sweep import plan_sweep, run_config, trial_config
from tests.conftest import noise, train_overrides

OWN = ["sweep.per_method.mixture.pretrain.train.optim.lr=5e-3", "sweep.per_method.generic@d1.pretrain.train.optim.lr=5e-3",
       "sweep.per_method.distill.specialize.train.optim.lr=2e-3"]


def study(tmp_path, *extra):
    """The second edition's design (distillation, SALT, every expert) at two seeds, planned without its data."""
    return load_job("jobs/sweeps/study2.yaml", [f"run.root={tmp_path}", "sweep.seeds=[0, 1]", "sweep.salt_kd_share=0.2",
                                                *extra])


def test_each_method_trains_at_its_own_settings_and_the_others_keep_their_names(tmp_path):
    base = plan_sweep(study(tmp_path), check_data=False)
    p = plan_sweep(study(tmp_path, *OWN), check_data=False)
    runs, trials = {r.name: r for r in p.runs}, {t.name: t for t in p.trials}
    assert len(p.runs) == len(base.runs) and len(p.trials) == len(base.trials)
    # YAML reads 5e-3 as text: the plan has the key's type; the names say the value
    generic = runs["generic-d1-pretrain-lr0.005-seed1"]
    assert generic.own == (("pretrain.train.optim.lr", 0.005),)
    assert runs["mixture-d1-pretrain-lr0.005-seed0"].own == generic.own
    # the methods not named, and the large generic model (generic@d1 names the small one only), keep their names
    untouched = {r.name for r in base.runs if not r.name.startswith(("generic-d1", "mixture"))}
    assert untouched <= set(runs) and all(not runs[n].own for n in untouched) and "generic-d2-seed0" in runs
    # SALT's teacher is the small generic model: its reference follows the name
    assert runs["salt-d2-seed0"].teacher == "generic-d1-pretrain-lr0.005-seed0" and not runs["salt-d2-seed0"].own
    # the student starts from the small generic model, is taught by the large one, and has its own specialize rate
    student = next(t for t in p.trials if t.role == "distill" and t.seed == 0 and t.domain == "legal")
    assert student.source == "generic-d1-pretrain-lr0.005-seed0" and student.teacher_run == "generic-d2-seed0"
    assert student.teacher in trials and trials[student.teacher].role == "teacher" and not trials[student.teacher].own
    assert dict(student.own) == {"pretrain.train.optim.lr": 0.005, "specialize.train.optim.lr": 0.002}
    assert student.name.endswith("-pretrain-lr0.005-specialize-lr0.002-seed0")
    # every expert of SLM-mix starts from its run at its rate; every reference names a planned run or trial
    assert all(t.source == f"mixture-d1-pretrain-lr0.005-seed{t.seed}" for t in p.trials if t.role == "experts")
    assert {t.source for t in p.trials} | {t.teacher_run for t in p.trials if t.teacher_run} <= set(runs)
    # not an axis: the report does not split the design by it (the claims compare the methods in one report)
    assert p.axes == () and Plan.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert '"own"' not in json.dumps(base.to_json())  # a plan without own settings is written as before them
    # each run's and trial's job is at its own settings
    job = study(tmp_path)
    job = replace(job, pretrain=replace(job.pretrain, output=str(tmp_path / "checkpoints")))
    assert run_config(job, generic).pretrain.train.optim.lr == 0.005
    assert run_config(job, runs["generic-d2-seed0"]).pretrain.train.optim.lr == 0.01
    assert trial_config(job, student).specialize.train.optim.lr == 0.002
    assert trial_config(job, trials[student.teacher]).specialize.train.optim.lr == 0.001
    # the dry run says them
    from slm.tune.plan import format_plan

    assert ("each method's own settings (sweep.per_method; a trial carries its run's): distill@d1 "
            "pretrain.train.optim.lr 0.005, specialize.train.optim.lr 0.002; generic@d1 pretrain.train.optim.lr 0.005; "
            "mixture@d1 pretrain.train.optim.lr 0.005") in format_plan(p)
    # a part names runs with their values
    part = plan_sweep(study(tmp_path, *OWN, "sweep.part=[mixture-d1-pretrain-lr0.005]"), check_data=False)
    assert {r.name for r in part.runs} == {"mixture-d1-pretrain-lr0.005-seed0", "mixture-d1-pretrain-lr0.005-seed1"}


def test_bad_own_settings_fail_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"'sweep.per_method.mixtur': no method 'mixtur'"):
        study(tmp_path, "sweep.per_method.mixtur.pretrain.train.optim.lr=5e-3")
    with pytest.raises(ConfigError, match=r"'sweep.per_method.mixture.pretrain.train.optim.lr': also an axis"):
        study(tmp_path, "sweep.per_method.mixture.pretrain.train.optim.lr=5e-3",
              "sweep.axes={pretrain.train.optim.lr: [1e-2]}")
    with pytest.raises(ConfigError, match=r"'sweep.per_method.mixture.pretrain.train.seed': the sweep sets it"):
        study(tmp_path, "sweep.per_method.mixture.pretrain.train.seed=3")
    with pytest.raises(ConfigError, match=r"'sweep.per_method.mixture.pretrain.train.optim.lr': one value"):
        study(tmp_path, "sweep.per_method.mixture.pretrain.train.optim.lr=[5e-3, 1e-2]")
    with pytest.raises(ConfigError, match=r"'sweep.per_method.mixture.pretrain.train.optim.lr'.*expected float"):
        plan_sweep(study(tmp_path, "sweep.per_method.mixture.pretrain.train.optim.lr=fast"), check_data=False)
    with pytest.raises(ConfigError, match=r"'sweep.per_method.dsir': this sweep trains no dsir"):
        plan_sweep(study(tmp_path, "sweep.per_method.dsir.pretrain.train.optim.lr=5e-3"), check_data=False)
    with pytest.raises(ConfigError, match=r"'sweep.per_method.generic@d3': this sweep trains no generic at d3"):
        plan_sweep(study(tmp_path, "sweep.per_method.generic@d3.pretrain.train.optim.lr=5e-3"), check_data=False)


@pytest.mark.ray
@pytest.mark.slow
def test_own_settings_run_end_to_end_and_are_columns(train_run, slm_cli):
    """A real sweep where the soup pretrains at its own rate: its run trains at it (the rate it logged), the
    other method's finished run is kept, and the table has the setting as a column (the rows of methods without
    one say the spec's value)."""
    common = train_overrides(
        train_run, "sweep.methods=[generic, soup]", "sweep.sizes=[tiny]", "sweep.domains=[legal]",
        "resample.domains=[]", "sweep.pretrain_steps=[10]", "sweep.domain_tokens=[3200]", "sweep.specialize_steps=[5]",
        "sweep.seeds=[0]", "pretrain.train.num_workers=0", "specialize.train.num_workers=0",
        "pretrain.train.checkpoint_every=0", "specialize.train.checkpoint_every=0", "ray.include_dashboard=false",
        "ray.num_cpus=2", "sweep.name=own", "pretrain.train.log_every=1")
    first = slm_cli("sweep", "jobs/sweeps/quickstart.yaml", *common)
    assert noise(first.stdout + first.stderr) == {}
    sweep = train_run.run.dir / "sweeps" / "own"
    generic = sweep / "checkpoints" / "generic-tiny-seed0" / "model.safetensors"
    trained = generic.stat().st_mtime_ns
    slm_cli("sweep", "jobs/sweeps/quickstart.yaml", *common, "sweep.per_method.soup.pretrain.train.optim.lr=1e-2")
    assert generic.stat().st_mtime_ns == trained  # the generic run is the same run: kept, not retrained
    def peak_lr(run: str) -> float:  # the rate its schedule reached, as the run logged it
        lines = (sweep / "checkpoints" / run / "logs" / "metrics.jsonl").read_text().splitlines()
        return max(json.loads(line).get("lr", 0.0) for line in lines)

    assert peak_lr("soup-tiny-lr0.01-seed0") / peak_lr("generic-tiny-seed0") == pytest.approx(0.01 / 0.003)
    rows = {r["trial"]: r for r in pq.read_table(sweep / "results.parquet").to_pylist()}
    assert rows["soup-tiny-p10-t3200-s5-lr0.01-seed0"]["pretrain.train.optim.lr"] == 0.01
    assert rows["generic-tiny-p10-t3200-s5-seed0"]["pretrain.train.optim.lr"] == 3e-3  # the quickstart spec's


def test_a_trial_without_own_settings_keeps_the_key_it_had_before_them(tmp_path):
    """Rows finished before ``sweep.per_method`` existed stay current: a trial's key leaves ``own`` out at its
    default (the key of its fields as they were), and a trial with own settings has a key of its own."""
    from dataclasses import asdict

    from slm.config import config_hash
    from slm.tune.sweep import trial_key

    cfg = study(tmp_path)
    t = next(t for t in plan_sweep(cfg, check_data=False).trials if t.role == "distill")
    before = {k: v for k, v in asdict(t).items() if k != "own"}
    assert trial_key(cfg, t) == config_hash({"trial": before, "specialize": cfg.specialize})
    assert trial_key(cfg, replace(t, own=(("specialize.train.optim.lr", 0.002),))) != trial_key(cfg, t)
