"""Budget sweeps: bad specs fail before anything runs; `advise` on a hand-checkable table; a tiny real
sweep on Ray Tune, SIGKILLed after its first trials and rerun, finishes only the missing trials."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pyarrow.parquet as pq
import pytest
import yaml

from slm.analysis.advise import advise, format_advice
from slm.analysis.report import markdown, near_front, pareto
from slm.analysis.results import MEANS, aggregate
from slm.artifacts import atomic_write_text
from slm.config import ConfigError, dump_yaml
from slm.job import load_job
from slm.layout import RunLayout
from slm.records.plan import PretrainRun, Trial
from slm.tune.sweep import SweepSpecError, plan_sweep
from tests.conftest import REPO, noise, train_overrides


@pytest.mark.ray
def test_bad_sweep_specs_fail_before_any_trial(train_run):
    def spec(*extra):
        return load_job(None, train_overrides(train_run, "sweep.sizes=[tiny]", *extra))

    with pytest.raises(ConfigError, match="sweep.methods"):  # method names: the registry's, checked by plan
        plan_sweep(spec("sweep.methods=[generic, moe]"), check_data=False)
    with pytest.raises(ConfigError, match="sweep.pretrain_steps': budgets must be positive"):
        spec("sweep.pretrain_steps=[0, 10]")
    with pytest.raises(ConfigError, match="sweep.domain_tokens"):
        spec("sweep.domain_tokens=[]")
    with pytest.raises(SweepSpecError, match="over sweep.inference_budget"):
        plan_sweep(spec("sweep.sizes=[tiny, d4]", "sweep.inference_budget=2e6"))
    with pytest.raises(SweepSpecError, match=r"'medical' has no packed .*domain/medical.*make it with `slm run"):
        plan_sweep(spec("sweep.domains=[legal, medical]"))
    with pytest.raises(ConfigError, match="sweep.sizes': 'huge' is neither"):  # refused as the spec loads
        spec("sweep.sizes=[huge]")
    p = plan_sweep(spec("sweep.methods=[generic, importance]", "sweep.pretrain_steps=[10, 20]",
                  "sweep.domain_tokens=[1000, 2000]", "sweep.specialize_steps=[5]"))
    # pretraining is paid once per (method, size); SLM-is once per domain too; 2 × 2 trials each
    assert [r.name for r in p.runs] == ["generic-tiny", "importance-legal-tiny"]
    assert all(r.steps == 20 and r.snapshots == (10, 20) for r in p.runs)
    assert len(p.trials) == 8 and p.estimate.total_flops > 0
    # the seed axis repeats every run and trial per seed; a trial's setting is its name without the seed
    p = plan_sweep(spec("sweep.methods=[generic]", "sweep.pretrain_steps=[10]", "sweep.domain_tokens=[1000]",
                  "sweep.specialize_steps=[5]", "sweep.seeds=[0, 3]"))
    assert [r.name for r in p.runs] == ["generic-tiny-seed0", "generic-tiny-seed3"]
    assert [(t.name, t.setting, t.seed) for t in p.trials] == [
        ("generic-tiny-p10-t1000-s5-seed0", "generic-tiny-p10-t1000-s5", 0),
        ("generic-tiny-p10-t1000-s5-seed3", "generic-tiny-p10-t1000-s5", 3)]
    with pytest.raises(ConfigError, match="sweep.seeds"):
        spec("sweep.seeds=[1, 1]")


@pytest.mark.ray
@pytest.mark.slow  # the data stages through the CLI again (~35 s)
def test_the_missing_data_hint_works_as_written(train_run, slm_cli, tmp_path):
    """A sweep over a domain the data stages left out names the command that makes its data; run
    verbatim (in a copy of the run directory, as `slm sweep` left it), the sweep's plan then passes."""
    shutil.copytree(train_run.run.dir, tmp_path / train_run.run.name)
    cfg = load_job(None, train_overrides(train_run, f"run.root={tmp_path}", "resample.tokens=20000",
                                         "resample.methods=[crisp]", "sweep.sizes=[tiny]",
                                         "sweep.methods=[generic, importance]", "sweep.domains=[legal, medical]"))
    atomic_write_text(RunLayout.of(cfg).config, dump_yaml(cfg))  # what `slm sweep` writes first
    with pytest.raises(SweepSpecError) as err:
        plan_sweep(cfg)
    command = shlex.split(re.search(r"make it with `([^`]*)`", str(err.value)).group(1))
    assert command[:2] == ["slm", "run"], err.value
    slm_cli(*command[1:])
    assert {r.name for r in plan_sweep(cfg).runs} == {"generic-tiny", "importance-legal-tiny", "importance-medical-tiny"}


def test_the_claims_experiments_are_planned_beside_the_grid(tmp_path):
    """C4–C6's runs and trials (sweep.large_size, distill, salt_kd_share, all_experts), planned from the
    config alone (a dry run): the large generic model per seed, SALT after its teacher, the teachers'
    specializations and the distilled students (a second wave), every mixture expert at one cell."""
    def spec(*extra):
        return load_job(None, [f"run.root={tmp_path}", "cluster.k=4", "sweep.methods=[generic, mixture]",
                               "sweep.sizes=[d1]", "sweep.domains=[legal]", "sweep.pretrain_steps=[10, 20]",
                               "sweep.domain_tokens=[1000, 2000]", "sweep.specialize_steps=[5, 10]",
                               "sweep.seeds=[0, 1]", *extra])

    p = plan_sweep(spec("sweep.large_size=d2", "sweep.distill=true", "sweep.salt_kd_share=0.2", "sweep.all_experts=true"),
             check_data=False)
    runs = {r.name: r for r in p.runs}
    assert list(runs)[-2:] == ["salt-d2-seed0", "salt-d2-seed1"]  # teachers train first
    assert runs["salt-d2-seed1"].teacher == "generic-d1-seed1" and runs["salt-d2-seed1"].kd_steps == 4
    assert runs["generic-d2-seed0"].role == "large" and runs["generic-d2-seed0"].eval_every == 1
    assert runs["generic-d2-seed0"].snapshots == (20,) and len(runs) == 8
    roles = [t.role for t in p.trials]
    assert (roles.count("grid"), roles.count("teacher"), roles.count("distill"), roles.count("experts")) == (32, 8, 8, 8)
    student = next(t for t in p.trials if t.name == "distill-d1-from-d2-p20-t1000-s5-seed1")
    assert (student.wave, student.source, student.teacher, student.teacher_run) == (
        2, "generic-d1-seed1", "generic-d2-p20-t1000-s5-seed1", "generic-d2-seed1")
    assert all(t.wave == 1 for t in p.trials if t.role != "distill")
    experts = [t for t in p.trials if t.role == "experts"]
    assert sorted(t.expert for t in experts if t.seed == 0) == [0, 1, 2, 3]
    assert {(t.pretrain_steps, t.domain_tokens, t.specialize_steps) for t in experts} == {(20, 1000, 5)}
    # The large runs sized on their own (sweep.large_steps): SALT's KD share, the teachers' budget.
    short = plan_sweep(spec("sweep.large_size=d2", "sweep.distill=true", "sweep.salt_kd_share=0.2", "sweep.large_steps=8"),
                 check_data=False)
    runs = {r.name: r for r in short.runs}
    assert (runs["generic-d2-seed0"].steps, runs["salt-d2-seed0"].steps, runs["salt-d2-seed0"].kd_steps) == (8, 8, 2)
    assert runs["generic-d1-seed0"].steps == 20
    student = next(t for t in short.trials if t.name == "distill-d1-from-d2-p20-t1000-s5-seed1")
    assert student.teacher == "generic-d2-p8-t1000-s5-seed1" and student.pretrain_steps == 20
    assert {t.pretrain_steps for t in short.trials if t.role == "teacher"} == {8}
    with pytest.raises(ConfigError, match="sweep.large_size"):
        spec("sweep.distill=true")
    with pytest.raises(SweepSpecError, match="not larger than the smallest size"):
        plan_sweep(spec("sweep.large_size=d1", "sweep.distill=true"), check_data=False)
    with pytest.raises(ConfigError, match="sweep.all_experts"):
        plan_sweep(spec("sweep.methods=[generic]", "sweep.all_experts=true"), check_data=False)


def test_a_trials_config_is_built_from_typed_values_not_override_strings(tmp_path):
    """A snapshot path with ': ' and ' #' in it (which YAML-parsed override strings broke) reaches the
    trial's config as it is; a distillation trial gets wave 1's teacher; a pretraining run's config too."""
    from slm.tune.sweep import run_config, trial_config

    root = tmp_path / "odd: name #1"
    default = load_job(None, [])
    cfg = replace(default, run=replace(default.run, root=str(root)))  # as an override string it would not parse
    t = Trial(source="generic-d1-seed0", method="distill", size="d1", pretrain_steps=20, domain="legal",
              domain_tokens=1000, specialize_steps=5, seed=0, setting="distill-x", name="distill-x-seed0",
              role="distill", teacher="generic-d2-x-seed0", teacher_run="generic-d2-seed0", wave=2)
    trial = trial_config(cfg, t)
    assert trial.specialize.source == str(root / "default" / "checkpoints" / "generic-d1-seed0" / "snapshots"
                                          / "step-00000020.safetensors")
    assert trial.specialize.teacher.checkpoint == str(root / "default" / "specialized" / "legal" / "generic-d2-x-seed0"
                                                      / "model.safetensors")
    assert (trial.specialize.train.budget.steps, trial.specialize.train.budget.tokens) == (5, 0)
    assert trial.specialize.train.seed == 0 and trial.specialize.expert == -1
    assert trial.specialize.train.optim == cfg.specialize.train.optim  # the rest as the job has it
    run = PretrainRun(name="salt-d2-seed1", method="generic", size="d2", domain=None, seed=1, steps=40,
                      snapshots=(40,), role="salt", teacher="generic-d1-seed1", kd_steps=8, eval_every=5)
    pre = run_config(cfg, run).pretrain
    assert (pre.name, pre.model.depth, pre.train.budget.steps, pre.train.seed, pre.train.eval_every) == (
        "salt-d2-seed1", 2, 40, 1, 5)
    assert pre.teacher.checkpoint == str(root / "default" / "checkpoints" / "generic-d1-seed1" / "model.safetensors")
    assert pre.teacher.kd_steps == 8 and pre.snapshot_steps == [40] and pre.domain == ""
    # a per-domain method's run says its domain in its own section, not in resample's
    slm_is = run_config(cfg, replace(run, name="importance-medical-d1", method="importance", domain="medical"))
    assert slm_is.pretrain.domain == "medical" and slm_is.resample == cfg.resample


def test_a_rerun_reuses_a_finished_trials_row_only_under_the_same_config(tmp_path):
    """What a rerun skips: a trial whose row file carries the key of this trial under this specialization
    config; another config (or no file) runs it again."""
    from slm.artifacts import atomic_write_json
    from slm.tune.sweep import finished_row, row_path, trial_key

    cfg = load_job(None, [f"run.root={tmp_path}"])
    t = Trial(source="generic-d1-seed0", method="generic", size="d1", pretrain_steps=20, domain="legal",
              domain_tokens=1000, specialize_steps=5, seed=0, setting="generic-d1-p20-t1000-s5",
              name="generic-d1-p20-t1000-s5-seed0", role="grid")
    assert finished_row(cfg, t) is None
    row_path(cfg, t).parent.mkdir(parents=True)
    atomic_write_json(row_path(cfg, t), {"key": trial_key(cfg, t), "row": {"trial": t.name, "perplexity": 9.5}})
    assert finished_row(cfg, t) == {"trial": t.name, "perplexity": 9.5}
    other = replace(cfg, specialize=replace(cfg.specialize, train=replace(cfg.specialize.train, seed=7)))
    assert finished_row(other, t) is None  # another specialization config: trained again
    assert finished_row(cfg, replace(t, specialize_steps=10)) is None  # another trial under the same name


ROWS = [  # hand-checkable: FLOPs in units, perplexities chosen so the answer is obvious
    dict(trial="a", method="generic", size="d2", inference_flops_per_token=10, domain="legal", domain_tokens=1000,
         generic_flops=100, per_domain_flops=10, generic_device_seconds=1, per_domain_device_seconds=1,
         perplexity=30.0, accuracy=0.1, pretrain_steps=1, specialize_steps=1),
    dict(trial="b", method="soup", size="d2", inference_flops_per_token=10, domain="legal", domain_tokens=1000,
         generic_flops=300, per_domain_flops=5, generic_device_seconds=3, per_domain_device_seconds=1,
         perplexity=25.0, accuracy=0.2, pretrain_steps=1, specialize_steps=1),
    dict(trial="c", method="importance", size="d2", inference_flops_per_token=10, domain="legal",
         domain_tokens=1000, generic_flops=0, per_domain_flops=150, generic_device_seconds=0,
         per_domain_device_seconds=2, perplexity=24.0, accuracy=0.25, pretrain_steps=1, specialize_steps=1),
    dict(trial="d", method="generic", size="d4", inference_flops_per_token=40, domain="legal", domain_tokens=8000,
         generic_flops=400, per_domain_flops=40, generic_device_seconds=4, per_domain_device_seconds=1,
         perplexity=20.0, accuracy=0.3, pretrain_steps=1, specialize_steps=1),
]


def trials(rows: list[dict], seed: int | None = None, shift: float = 0.0) -> list[dict]:
    """Hand rows as a sweep's table holds them: every measured column, one trial per setting and seed
    (``shift`` moves this seed's perplexities)."""
    return [{**dict.fromkeys(MEANS, 0.0), "params": 0, "expert": None, **r, "perplexity": r["perplexity"] + shift, "setting": r["trial"],
             "seed": seed, "trial": r["trial"] + ("" if seed is None else f"-seed{seed}")} for r in rows]


ASK = dict(pretrain_budget=1000, specialization_budget=1000, inference_budget=100, domain_tokens=10000)


def test_advise_picks_the_right_row():
    def ask(**kw):
        return advise(trials(ROWS), **{**ASK, **kw})

    assert ask()["answer"]["trial"] == "d"  # everything fits: the best perplexity
    assert ask(inference_budget=10)["answer"]["trial"] == "c"  # the large model is out; SLM-is wins
    assert ask(inference_budget=10, specialization_budget=100)["answer"]["trial"] == "b"  # SLM-is is too dear per domain
    assert ask(inference_budget=10, specialization_budget=100, pretrain_budget=200)["answer"]["trial"] == "a"
    assert ask(domain_tokens=2000)["answer"]["trial"] == "c"  # d needed 8000 in-domain tokens
    a = ask(inference_budget=10, domains=4)
    assert a["answer"]["total"] == 0 + 4 * 150  # C_total(N) = C_generic + N·C_spec
    nothing = ask(inference_budget=1)
    assert nothing["answer"] is None and any("outside what was measured" in n for n in nothing["notes"])
    assert any("above everything measured" in n for n in ask(pretrain_budget=1e9)["notes"])
    assert [r["trial"] for r in pareto([{**r, "t": r["generic_flops"] + r["per_domain_flops"]} for r in ROWS], "t")] \
        == ["a", "c", "d"]  # b (305, 25) is beaten by c (150, 24)
    # one seed per setting: the answer stands, but its margin has no error bar and the advice says so
    a = ask(inference_budget=10)
    assert a["answer"]["margin"]["runner_up"] == "b" and a["answer"]["margin"]["separable"] is None
    assert not a["answer"]["tie"] and any("spread is unknown" in n for n in a["notes"])
    # what a budget ruled out although it was better, by which budget and how far: SLM-is's c (24 < 25)
    # costs 150 per domain against 100; d (20) is over the inference budget, 40 against 10
    b = ask(inference_budget=10, specialization_budget=100)
    assert {e["trial"]: e["over"] for e in b["excluded"]} == {
        "c": {"specialization": {"value": 150, "limit": 100}},
        "d": {"inference": {"value": 40, "limit": 10}}}
    text = format_advice(b)
    assert "- SLM-is (CRISP) (`importance`) at size d2: 24.00 (n=1) (c); over budget: specialization 150 > 100 (1.5×)" in text
    assert ask()["excluded"] == []  # the best of all was admissible


def test_seeds_fold_into_means_with_intervals_and_ties_are_called():
    # three seeds; each setting's own perplexity shifts (-1, 0, +1 or the reverse) give every setting a
    # standard error of 1/sqrt(3) = 0.577 and a 95% half-interval of 4.30 × 0.577 = 2.48
    shifts = {"a": [-1.0, 0.0, 1.0], "b": [1.0, 0.0, -1.0], "c": [-1.0, 0.0, 1.0], "d": [-1.0, 0.0, 1.0]}
    table = [row for seed in range(3) for r in ROWS for row in trials([r], seed, shifts[r["trial"]][seed])]
    settings = {r["trial"]: r for r in aggregate(table)}
    assert set(settings) == {"a", "b", "c", "d"} and all(r["n"] == 3 and r["seeds"] == [0, 1, 2] for r in settings.values())
    assert settings["c"]["perplexity"] == pytest.approx(24.0) and settings["c"]["perplexity_se"] == pytest.approx(3 ** -0.5)
    assert settings["b"]["perplexity_by_seed"] == [26.0, 25.0, 24.0]
    # c (24) vs b (25), one cell (the seed pairs their data): paired differences 3, 1, -1, mean 1.0 ± 1.15:
    # the 95% interval includes zero, a tie, said plainly, not a ranking
    a = advise(table, **{**ASK, "inference_budget": 10})
    assert a["answer"]["trial"] == "c" and a["answer"]["tie"] and a["answer"]["tied_with"] == ["b"]
    tied = a["answer"]["rivals"][0]
    assert tied["test"] == "paired t" and tied["difference"] == pytest.approx(1.0) and tied["se"] == pytest.approx(2 / 3 ** 0.5)
    assert a["answer"]["margin"]["trial"] == "a"  # the margin: over the best setting outside the tie
    text = format_advice(a)
    assert text.startswith("A tie on legal at these budgets: SLM-is (CRISP) at size d2 has the lowest mean perplexity, within "
                           "noise of Soup-of-Experts at size d2 (1.00 ppl behind, 95% interval -3.97 to 5.97 (paired t))")
    assert "Margin on legal over the best setting outside the tie: generic at size d2 (a), 6.00 ppl behind" in text
    assert "24.00 [21.52, 26.48] (n=3)" in text
    # d (20) vs c (24): another in-domain data size, so Welch's t: 4.0 ± 0.816 (t = 4.9 on 4 df), a winner
    a = advise(table, **ASK)
    assert a["answer"]["trial"] == "d" and not a["answer"]["tie"] and a["answer"]["margin"]["separable"] is True
    assert a["answer"]["margin"]["test"] == "Welch t"
    assert not any("tie" in n or "unknown" in n for n in a["notes"])
    # the report's front on the means, and what is within noise of it: b (25 at cost 305) is dominated by
    # c (24 at cost 150) but not out of the noise
    rows = [{**r, "t": r["generic_flops"] + r["per_domain_flops"]} for r in settings.values()]
    assert [r["trial"] for r in pareto(rows, "t")] == ["a", "c", "d"]
    assert [r["trial"] for r in near_front(rows, "t")] == ["b"]
    summary = markdown(list(settings.values()), trials=len(table), plots=["pretrain_cost.png"])
    assert "12 specialized models: 4 settings, up to 3 seed(s)" in summary and "| b | 305 | 25.00 [22.52, 27.48] (n=3) |" in summary
    assert "| SLM-is (CRISP) (`importance`) | d2 |" in summary  # the plots' names, the config's beside
    assert "Plots: `pretrain_cost.png`." in summary  # only what was written
    from slm.analysis.report import (
        caption,  # what every plot's points and error bars are, and what the axes omit
    )

    assert caption(list(settings.values())) == (
        "Each point a setting: mean over up to 3 seeds, error bars its 95% t interval. Served size d2 (0.00M params), "
        "d4 (0.00M params); 1 specialization steps. Points of one cost are spread sideways a little so that none "
        "hides another.")


def test_the_table_is_a_tensorboard_hparams_experiment(tmp_path):
    """One HParams session per trial, its budgets as hyperparameters and its measures as metrics, which
    TensorBoard's own plugin data decodes; a rewrite replaces the sessions instead of adding to them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    from slm.tune.tracking import write_hparams

    rows = [{**r, "perplexity_before": 100.0, "specialize_flops": 1.0, "pretrain_flops": 2.0} for r in trials(ROWS, seed=0)]
    for _ in range(2):
        folder = write_hparams(rows, tmp_path / "tensorboard")
    sessions = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert sessions == ["a-seed0", "b-seed0", "c-seed0", "d-seed0"]
    events = EventAccumulator(str(folder / "b-seed0"))
    events.Reload()
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.SummaryMetadata("_hparams_/session_start_info").plugin_data.content).session_start_info
    assert start.hparams["method"].string_value == "soup" and start.hparams["size"].string_value == "d2"
    assert start.hparams["domain_tokens"].number_value == 1000
    assert events.Scalars("perplexity")[0].value == 25.0 and events.Scalars("accuracy")[0].value == pytest.approx(0.2)
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        events.SummaryMetadata("_hparams_/experiment").plugin_data.content).experiment
    # what varies across these trials (size, in-domain tokens) and the method; not the one domain, seed, …
    assert {h.name for h in experiment.hparam_infos} == {"method", "size", "domain_tokens"}
    assert {m.name.tag for m in experiment.metric_infos} >= {"perplexity", "accuracy", "per_domain_flops"}
    # issue 46: the seed read 0.0000 in the HParams table; it is a discrete label
    seeds = [*rows, *[{**r, "seed": 1, "trial": r["trial"].replace("seed0", "seed1")} for r in rows]]
    folder = write_hparams(seeds, tmp_path / "tensorboard")
    events = EventAccumulator(str(folder / "b-seed1"))
    events.Reload()
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.SummaryMetadata("_hparams_/session_start_info").plugin_data.content).session_start_info
    assert start.hparams["seed"].string_value == "1"
    experiment = plugin_data_pb2.HParamsPluginData.FromString(
        events.SummaryMetadata("_hparams_/experiment").plugin_data.content).experiment
    seed = next(h for h in experiment.hparam_infos if h.name == "seed")
    assert [v.string_value for v in seed.domain_discrete.values] == ["0", "1"]


def test_a_table_that_mixes_two_sweeps_is_refused():
    table = trials(ROWS, 0) + [{**r, "size": "d4"} for r in trials(ROWS, 1)]
    with pytest.raises(ValueError, match="setting 'a' has different 'size'"):
        aggregate(table)


@pytest.mark.ray
def test_the_study_design_meets_the_issue(slm_cli):
    """jobs/sweeps/study.yaml as shipped: the whole corpus, ≥ 3 domains and seeds, pretraining budgets
    spanning a decade with one at exactly 0.6× the largest (C3), ≥ 2 data sizes and specialization budgets; its
    dry run prints the plan and its cost."""
    cfg = load_job(REPO / "jobs" / "sweeps" / "study.yaml", [])
    sw = cfg.sweep
    assert cfg.embed.fraction == 1.0 and cfg.stages[-2:] == ["sweep", "report"]
    # No part embeds: every part reads the committed pinned clusters, made from the same windows.
    assert "embed" not in cfg.stages and (REPO / cfg.cluster.assignments).is_file()
    assert cfg.embed.splits == ["all", "train"] and 0 < sw.large_steps <= max(sw.pretrain_steps)
    assert len(sw.domains) >= 3 and len(sw.seeds) >= 3 and max(sw.pretrain_steps) >= 10 * min(sw.pretrain_steps)
    assert round(0.6 * max(sw.pretrain_steps)) in sw.pretrain_steps
    assert len(sw.domain_tokens) >= 2 and len(sw.specialize_steps) >= 2
    assert set(cfg.resample.all_domains) == set(sw.domains) == set(cfg.embed.domains)
    p = plan_sweep(cfg, check_data=False)
    per_domain = sum(m in ("importance", "dsir") for m in sw.methods)
    shared = len(sw.methods) - per_domain
    grid_runs = [r for r in p.runs if r.role == "grid"]
    assert len(grid_runs) == (shared + per_domain * len(sw.domains)) * len(sw.seeds)
    assert sum(t.role == "grid" for t in p.trials) == len(sw.seeds) * len(sw.pretrain_steps) * len(sw.domains) \
        * len(sw.domain_tokens) * len(sw.specialize_steps) * (shared + per_domain)
    # the claims' experiments: C4 (distillation with its teacher), C5 (SALT beside its baseline), C6
    roles = {t.role for t in p.trials} | {r.role for r in p.runs}
    assert sw.distill and sw.salt_kd_share and sw.all_experts and {"teacher", "distill", "experts", "large", "salt"} <= roles
    assert len({t.name for t in p.trials}) == len(p.trials)  # every trial its own name
    out = slm_cli("sweep", "jobs/sweeps/study.yaml", "--dry-run").stdout
    assert f"{len(p.trials)} specialization trials" in out and "estimated cost" in out


@pytest.mark.parametrize("study", ["study", "study2"])
def test_the_study_parts_partition_each_seed_and_train_nothing_twice(study):
    """jobs/<study>/parts.yaml as shipped: the four parts of a seed hold every run and trial of that seed's
    share of the study once, and no part trains a run another part trains (no dependency outside a part)."""
    parts = yaml.safe_load((REPO / "jobs" / study / "parts.yaml").read_text())["parts"]
    spec = REPO / "jobs" / "sweeps" / f"{study}.yaml"
    whole = plan_sweep(load_job(spec, ["sweep.seeds=[1]"]), check_data=False)
    pieces = {name: plan_sweep(load_job(spec, ["sweep.seeds=[1]", f"sweep.part=[{', '.join(runs)}]"]), check_data=False)
              for name, runs in parts.items()}
    trials = [t.name for p in pieces.values() for t in p.trials]
    assert sorted(trials) == sorted(t.name for t in whole.trials) and len(set(trials)) == len(trials)
    runs = [r.name for p in pieces.values() for r in p.runs]
    assert sorted(runs) == sorted(r.name for r in whole.runs)  # each once: nothing trained in two parts
    assert all(r.owned for p in pieces.values() for r in p.runs)


def test_a_dry_run_refuses_a_domain_the_corpus_lacks(tmp_path):
    """Issue 32: `sweep.domains=[nosuch]` had a plan and a cost from --dry-run; only the real sweep refused it."""
    spec = REPO / "jobs" / "sweeps" / "quickstart.yaml"
    with pytest.raises(SweepSpecError, match=r"'sweep.domains': \['nosuch'\] not in the bundled corpus this job "
                                             r"builds \(corpus.domains\), whose domains are \['code', 'legal'"):
        plan_sweep(load_job(spec, [f"corpus.dir={tmp_path / 'none'}", "sweep.domains=[nosuch]"]), check_data=False)
    built = tmp_path / "corpus"
    for d in ("legal", "poetry"):  # a user's corpus: its own domains, not the bundled list
        (built / "domains" / d / "train").mkdir(parents=True)
    assert plan_sweep(load_job(spec, [f"corpus.dir={built}", "sweep.domains=[poetry]", "resample.domain=poetry"]),
                check_data=False).trials
    with pytest.raises(SweepSpecError, match=r"\['medical'\] not in the corpus in .*corpus, whose domains are "
                                             r"\['legal', 'poetry'\]"):
        plan_sweep(load_job(spec, [f"corpus.dir={built}", "sweep.domains=[medical]"]), check_data=False)


@pytest.mark.ray
@pytest.mark.slow  # 660 s of CI's ~3,800 (the slowest test): the study's spec, run twice
def test_tiny_study_killed_and_rerun_runs_only_missing_trials(train_run, tmp_path):
    """The study's spec at CI size (two seeds, one domain, three methods, the claims' experiments, the tiny
    model, trials training in their own processes) on the data tests' run: killed with SIGKILL mid-sweep,
    rerun, it runs only what had not finished; its report has the claims check."""
    overrides = train_overrides(
        train_run, "sweep.name=tiny", "sweep.methods=[generic, mixture, soup]", "sweep.sizes=[tiny]",
        "sweep.large_size=d2", "sweep.domains=[legal]", "resample.domains=[]", "sweep.pretrain_steps=[10, 20, 80]",
        "sweep.domain_tokens=[3200]", "sweep.specialize_steps=[5]", "sweep.seeds=[0, 1]", "sweep.curve_every=5",
        "sweep.large_steps=15",  # the large runs end at another step than the small ones
        # C4 at matched compute (issue 45): the student from the 10-step model, so that with its d2 teacher's
        # cost it costs less than SLM-mix at 80 steps
        "sweep.distill_steps=10",
        "pretrain.train.checkpoint_every=10", "specialize.train.checkpoint_every=0", "ray.include_dashboard=false",
        "ray.num_cpus=2")
    command = [sys.executable, "-m", "slm.cli", "sweep", "jobs/sweeps/study.yaml", *overrides]
    out = train_run.run.dir / "sweeps" / "tiny"
    log = tmp_path / "first.log"
    with log.open("w") as f:
        proc = subprocess.Popen(command, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    finished_before_kill = []
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        done = sorted(p.parent.name for p in (out / "specialized" / "legal").glob("*-p*/manifest.json"))
        if len(done) >= 4:
            time.sleep(5)  # let Tune record them in its experiment state
            finished_before_kill = done
            os.killpg(proc.pid, signal.SIGKILL)  # the driver, its embedded Ray and every trial with it
            break
        time.sleep(0.5)
    proc.wait(timeout=60)
    assert finished_before_kill, log.read_text()[-3000:]
    started_first = [json.loads(line)["trial"] for line in (out / "trials.log").read_text().splitlines()]
    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    # Legible output (issue 18): Tune's trials and their folders carry the sweep's trial names, its table
    # their method and budgets; one TensorBoard run per training run, short-named, and none of Tune's;
    # no ANSI codes and no Ray log folding in a redirected log.
    first_log = log.read_text()
    assert "\x1b[" not in first_log + second.stdout and "repeated" not in first_log + second.stdout
    assert "trials finished earlier (rows read from their folders)" in second.stdout
    waves = [p for p in (out / "tune").iterdir() if p.is_dir() and p.name.startswith("tiny-w")]
    assert any((wave / "generic-tiny-p10-t3200-s5-seed0").is_dir() for wave in waves), waves
    tensorboard = sorted(p.parent.relative_to(out / "tensorboard").as_posix()
                         for p in (out / "tensorboard").rglob("events.out.tfevents.*"))
    assert "pretrain/generic-tiny-seed0" in tensorboard and "specialize/legal/generic-tiny-p10-t3200-s5-seed0" in tensorboard
    assert not list((out / "tune").rglob("events.out.tfevents.*"))
    started = [json.loads(line)["trial"] for line in (out / "trials.log").read_text().splitlines()]
    started_second = started[len(started_first):]
    assert not set(finished_before_kill) & set(started_second), (finished_before_kill, started_second)
    assert any(name in second.stdout for name in started_second) and "valid ppl" in second.stdout  # Tune's table
    table = pq.read_table(out / "results.parquet").to_pylist()
    cell, top = "p10-t3200-s5", "p80-t3200-s5"  # the student's start (sweep.distill_steps); the largest budget
    assert sorted(r["trial"] for r in table) == sorted(
        [f"{m}-tiny-p{p}-t3200-s5-seed{seed}" for m in ("generic", "mixture", "soup") for p in (10, 20, 80)
         for seed in (0, 1)]
        + [f"{name}-seed{seed}" for seed in (0, 1) for name in (
            "generic-d2-p15-t3200-s5", f"distill-tiny-from-d2-{cell}", *(f"mixture-tiny-{top}-e{e}" for e in range(4)))])
    for r in table:
        assert r["perplexity"] > 1 and 0 <= r["accuracy"] <= 1
        assert r["pretrain_flops"] > 0 and r["specialize_flops"] > 0 and r["generic_flops"] == r["pretrain_flops"]
    by = {r["trial"]: r for r in table}
    assert by["soup-tiny-p20-t3200-s5-seed1"]["pretrain_flops"] == 2 * by["soup-tiny-p10-t3200-s5-seed1"]["pretrain_flops"]
    assert by["soup-tiny-p20-t3200-s5-seed0"]["perplexity"] != by["soup-tiny-p20-t3200-s5-seed1"]["perplexity"]
    # a distilled student carries its teacher's costs: the large model's pretraining and specialization
    # (the teacher specialized the large run's snapshot at sweep.large_steps, not at the student's 10)
    student, teacher = by[f"distill-tiny-from-d2-{cell}-seed0"], by["generic-d2-p15-t3200-s5-seed0"]
    plain = by[f"generic-tiny-{cell}-seed0"]
    assert student["pretrain_flops"] == pytest.approx(plain["pretrain_flops"] + teacher["pretrain_flops"])
    assert student["specialize_flops"] > plain["specialize_flops"] + teacher["specialize_flops"]  # + the teacher's forwards
    assert {by[f"mixture-tiny-{top}-e{e}-seed0"]["expert"] for e in range(4)} == {0, 1, 2, 3}
    curves = pq.read_table(out / "curves.parquet").to_pylist()
    salt = [c for c in curves if c["run"] == "salt-d2-seed1"]
    assert [c["step"] for c in salt] == [5, 10, 15] and all(c["loss"] > 0 for c in salt)
    assert {c["role"] for c in curves} >= {"large", "salt"}
    assert (out / "results.csv").exists()
    assert {p.name for p in (out / "report").glob("*.png")} == {  # fitted curves: three budgets are enough
        "pretrain_cost.png", "specialize_cost.png", "inference_size.png", "domain_tokens.png", "pretrain_curves.png",
        "fitted_curves.png"}
    assert "Pareto-optimal" in (out / "report" / "summary.md").read_text()
    # the generic tiny model's last doubling (40 -> 80 steps), at each seed, from the curves
    assert "| generic-tiny-seed0 | 80 |" in (out / "report" / "summary.md").read_text()
    assert "| generic-tiny-seed1 | 80 |" in (out / "report" / "summary.md").read_text()
    assert "-e1" not in (out / "report" / "summary.md").read_text()  # the every-expert trials are the claims' only
    claims = {c["id"]: c for c in json.loads((out / "report" / "claims.json").read_text())}
    assert sorted(claims) == [f"C{i}" for i in range(1, 7)]
    assert all(claims[c]["comparisons"] for c in ("C3", "C4", "C5", "C6")), claims
    assert "the plan has no importance" in claims["C1"]["untested"][0]  # CI size
    assert "no pretraining budget at 0.6× the largest (48 steps" in claims["C3"]["untested"][0]


@pytest.mark.ray
def test_a_study_in_two_parts_reports_as_one(train_run, slm_cli, tmp_path):
    """The study's spec at CI size run as two parts (a seed each, as benchmarks/study_part.py runs them),
    then `slm report --tables` over both: one table, the design's missing trial named, and a part that
    trained on other data refused."""
    common = train_overrides(
        train_run, "sweep.methods=[generic, mixture]", "sweep.sizes=[tiny]", "sweep.large_size=",
        "sweep.distill=false", "sweep.salt_kd_share=0", "sweep.all_experts=false", "sweep.domains=[legal]",
        "resample.domains=[]", "sweep.pretrain_steps=[10, 20]", "sweep.domain_tokens=[3200]",
        "sweep.specialize_steps=[5]", "pretrain.train.checkpoint_every=0", "specialize.train.checkpoint_every=0",
        "ray.include_dashboard=false", "ray.num_cpus=2")
    parts = {}
    for seed in (0, 1):
        name = f"part{seed}"
        proc = slm_cli("sweep", "jobs/sweeps/study.yaml", *common, f"sweep.seeds=[{seed}]", f"sweep.name={name}")
        printed = proc.stdout
        assert noise(proc.stdout + proc.stderr) == {}  # issue 31: no alarming library line without -v
        assert re.search(r"\[sweep\] 2/2 pretraining runs done \(100%\), [\d.]+/(s|min), in .+; last: \S+-tiny-seed\d",
                         printed)  # k of N
        # issue 46: a line per trial, named by the trial (not by the reused actor's first), with k of N
        ends = re.findall(r"\[sweep\] (\d)/4 wave 1 trials done \(\d+%\).*; last: (\S+) valid ppl [\d.]+", printed)
        assert sorted(k for k, _ in ends) == ["1", "2", "3", "4"] and all(n.endswith(f"-seed{seed}") for _, n in ends)
        assert printed.count("wave 1 trials done") == 4 and printed.count("pretraining runs done") == 2  # once each
        # no trial's line forwarded by Ray (a pretraining task's are: "(pretrain:<run> pid=…)", named right)
        assert not re.search(r"\((?!pretrain:)(\S+-seed\d) pid=\d+\).*\[train\]", printed)
        logs = sorted((train_run.run.dir / "sweeps" / name / "trial_logs").glob("*.log"))
        assert [p.stem for p in logs] == sorted(n for _, n in ends) and all("[train]" in p.read_text() for p in logs)
        parts[seed] = train_run.run.dir / "sweeps" / name
    design = tmp_path / "design.json"
    slm_cli("sweep", "jobs/sweeps/study.yaml", "--dry-run", "--plan-out", str(design), *common, "sweep.seeds=[0, 1]")
    plans = [json.loads((parts[s] / "plan.json").read_text()) for s in (0, 1)]
    assert plans[0]["data"] == plans[1]["data"] and set(plans[0]["data"]["sets"]) >= {"generic", "domain/legal", "valid/legal"}

    combined = tmp_path / "combined"
    printed = slm_cli("report", "--tables", str(parts[0]), str(parts[1]), "--plan", str(design),
                      "--out", str(combined)).stdout
    result = json.loads(printed[printed.index("{") if printed.startswith("{") else printed.index("\n{") + 1:])
    assert result["missing"] == [] and len(result["tables"]) == 2
    rows = pq.read_table(combined / "results.parquet").to_pylist()
    assert sorted(r["seed"] for r in rows) == [0] * 4 + [1] * 4
    assert (combined / "report" / "claims.md").exists() and (combined / "report" / "pretrain_cost.png").exists()

    # A part whose table lacks a planned trial: named.
    short = tmp_path / "short"
    shutil.copytree(parts[1], short, ignore=shutil.ignore_patterns("tune", "checkpoints", "specialized", "tensorboard"))
    table = pq.read_table(short / "results.parquet")
    lost = table.column("trial")[0].as_py()
    pq.write_table(table.slice(1), short / "results.parquet")
    out = slm_cli("report", "--tables", str(parts[0]), str(short), "--plan", str(design), "--out",
                  str(tmp_path / "short-report")).stdout
    assert "1 planned trials are in none of the tables" in out and lost in out

    # A part that trained on other packed data: refused, naming the set.
    other = tmp_path / "other"
    shutil.copytree(short, other)
    plan_json = json.loads((other / "plan.json").read_text())
    plan_json["data"]["sets"]["domain/legal"] = "0" * 16
    plan_json["data"]["fingerprint"] = "other"
    (other / "plan.json").write_text(json.dumps(plan_json))
    refused = slm_cli("report", "--tables", str(parts[0]), str(other), "--out", str(tmp_path / "refused"), check=False)
    assert refused.returncode != 0 and "['domain/legal']" in refused.stdout + refused.stderr
    assert not (tmp_path / "refused" / "results.parquet").exists()


TRIAL_NAMES = """
import json, sys, tempfile
import ray
from ray import tune
from ray.util.state import list_actors
from slm.tune.sweep import TrialNamedActor

def trial(config, greeting):
    tune.report({"score": config["x"]})
trial.__mixins__ = (TrialNamedActor,)  # as slm.tune.sweep.specialize_trial has it

context = ray.init(address="local", num_cpus=2, include_dashboard=True, dashboard_port=0, _temp_dir=tempfile.mkdtemp(prefix="slm-ray-"))
tuner = tune.Tuner(tune.with_resources(tune.with_parameters(trial, greeting="hi"), {"cpu": 1}),
                   param_space={"x": tune.grid_search([1, 2])},
                   tune_config=tune.TuneConfig(trial_name_creator=lambda t: f"generic-d2-seed{t.config['x']}"),
                   run_config=tune.RunConfig(storage_path=sys.argv[1], verbose=0))
tuner.fit()
actors = list_actors(address=f"http://{context.dashboard_url}", filters=[("class_name", "=", "ImplicitFunc")],
                     detail=True, raise_on_missing_output=False)
print(json.dumps(sorted(a.repr_name for a in actors)))
"""


@pytest.mark.ray
def test_each_trials_actor_is_named_after_its_trial(tmp_path):
    """Issue 31: every Tune trial's actor showed the function's name ("specialize_trial") on the dashboard's
    Actors page; with the sweep's mixin each shows its trial's name (read back through the State API,
    which needs the dashboard: a Ray of its own in a subprocess)."""
    proc = subprocess.run([sys.executable, "-c", TRIAL_NAMES, str(tmp_path / "tune")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["generic-d2-seed1", "generic-d2-seed2"]


@pytest.mark.ray
@pytest.mark.slow  # ~3 min on 2 idle cores: 6 trunks, 18 branches, 24 trials; its parts are default tests
def test_a_wsd_sweep_trains_every_budget_and_reports_the_curves_through_them(train_run, slm_cli):
    """Issue 43 at CI size: under `pretrain.train.optim.schedule: wsd` every smaller budget of a sweep is a
    cooldown branch (its own folder, its snapshot, its final evaluation in curves.parquet); the report fits
    the generic model's saturation and every family's curve through the fully trained budgets, and
    `slm advise` answers between and beyond them."""
    common = train_overrides(
        train_run, "sweep.methods=[generic, soup]", "sweep.sizes=[tiny]", "sweep.domains=[legal]",
        "resample.domains=[]", "sweep.pretrain_steps=[10, 20, 40, 80]", "sweep.domain_tokens=[3200]",
        "sweep.specialize_steps=[5]", "sweep.seeds=[0, 1, 2]", "sweep.name=wsd",
        "pretrain.train.optim.schedule=wsd", "pretrain.train.optim.warmup_steps=4",
        "pretrain.train.optim.decay_fraction=0.25", "pretrain.train.checkpoint_every=0",
        "pretrain.train.eval_every=0", "pretrain.model.soup.experts=2",
        "specialize.train.checkpoint_every=0", "ray.include_dashboard=false", "ray.num_cpus=2")
    dry = slm_cli("sweep", "jobs/sweeps/quickstart.yaml", "--dry-run", *common).stdout
    assert "a WSD trunk with a cooldown branch to each smaller one" in dry and "branches [10, 20, 40] (+18 steps)" in dry
    slm_cli("sweep", "jobs/sweeps/quickstart.yaml", *common)
    sweep = train_run.run.dir / "sweeps" / "wsd"
    trunk = sweep / "checkpoints" / "generic-tiny-seed1"
    index = json.loads((trunk / "snapshots" / "snapshots.json").read_text())
    assert sorted(index, key=int) == ["10", "20", "40", "80"]
    assert index["20"]["branch_point"] == 15 and (trunk / "branches" / f"step-{20:08d}" / "model.safetensors").exists()
    curves = pq.read_table(sweep / "curves.parquet").to_pylist()
    assert {(r["run"], r["step"]) for r in curves if r["role"] == "branch" and r["seed"] == 1} >= {
        ("generic-tiny-seed1@10", 10), ("generic-tiny-seed1@40", 40)}
    summary = (sweep / "report" / "summary.md").read_text()
    assert "The generic model's saturation, from the curve through its fully trained budgets" in summary
    assert "| generic-tiny-legal-t3200-s5 |" in summary and "snapshots of one cosine run" not in summary
    assert (sweep / "report" / "fitted_curves.png").exists()
    advice = slm_cli("advise", "--sweep", str(sweep), "--pretrain-budget", "1e12", "--specialization-budget", "1e12",
                     "--inference-budget", "1e9", "--domain-tokens", "3200").stdout
    assert "From the fitted curves on legal, at exactly these budgets" in advice and "EXTRAPOLATED beyond the measured" in advice
