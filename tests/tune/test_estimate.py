"""`slm sweep --dry-run --probe`: the plan replayed with measured rates (the replay's arithmetic on a real
plan, and one real probe of this machine, slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slm.job import load_job
from slm.tune.estimate import Rate, _schedule, estimate, probe_and_estimate
from slm.tune.sweep import plan_sweep

SPEC = Path(__file__).parents[2] / "jobs" / "sweeps" / "quickstart.yaml"


def test_list_scheduling_waits_for_teachers_and_fills_free_slots():
    assert _schedule([("a", 10, None), ("b", 5, None), ("c", 5, "a"), ("d", 1, None)], 2) == 15
    assert _schedule([("a", 3, None), ("b", 3, None), ("c", 3, None)], 1) == 9
    assert _schedule([("a", 3, None), ("b", 3, None), ("c", 3, None)], 3) == 3


def test_the_replay_adds_what_each_run_and_trial_does(tmp_path):
    # Snapshots of one cosine run (the quickstart trains WSD branches since issue 64: the test after this one).
    cfg = load_job(SPEC, [f"run.root={tmp_path}", "sweep.seeds=[0]", "sweep.methods=[generic]",
                          "pretrain.train.eval_every=0", "pretrain.train.checkpoint_every=0",
                          "pretrain.train.optim.schedule=cosine"])
    p = plan_sweep(cfg, check_data=False)
    rates = {"pretrain:generic:d2": Rate(step_s=1.0, eval_tokens_per_s=1000.0, setup_s=2.0, save_s=0.5),
             "specialize:d2": Rate(step_s=0.5, eval_tokens_per_s=2000.0, setup_s=1.0, save_s=0.25)}
    tune = {"per_trial_s": 3.0, "per_wave_s": 10.0}
    e = estimate(cfg, p, rates, tune, slots=1)
    (run,) = p.runs
    evals = 2 * cfg.pretrain.train.eval_tokens * len(e["valid_tokens"])  # before and at the end, none packed
    saves = len(run.snapshots) + 1
    assert e["pretrain_s"] == pytest.approx(2.0 + run.steps * 1.0 + evals / 1000.0 + saves * 0.5)
    trial = 3.0 + 1.0 + p.trials[0].specialize_steps * 0.5 + 2 * cfg.specialize.train.eval_tokens / 2000.0 + 0.25
    assert e["trials_s"] == pytest.approx(10.0 + trial * len(p.trials))
    assert e["total_s"] == pytest.approx(e["pretrain_s"] + e["trials_s"])
    # Two slots: the trials (all alike) take half the turns.
    assert estimate(cfg, p, rates, tune, slots=2)["trials_s"] == pytest.approx(10.0 + trial * len(p.trials) / 2)


def test_the_replay_adds_each_cooldown_branch_as_a_run_of_its_own(tmp_path):
    """The quickstart as shipped (issue 64): a WSD trunk of 80 steps and branches to 20 and 40, each branch its own
    set-up, its decay's steps, an evaluation at its end, and two saves (its branch point and its model)."""
    cfg = load_job(SPEC, [f"run.root={tmp_path}", "sweep.seeds=[0]", "sweep.methods=[generic]",
                          "pretrain.train.eval_every=0", "pretrain.train.checkpoint_every=0"])
    p = plan_sweep(cfg, check_data=False)
    (run,) = p.runs
    assert run.branches == (20, 40) and run.branch_steps == 4 + 8  # decay_fraction 0.2 of each budget
    rates = {"pretrain:generic:d2": Rate(step_s=1.0, eval_tokens_per_s=1000.0, setup_s=2.0, save_s=0.5),
             "specialize:d2": Rate(step_s=0.5, eval_tokens_per_s=2000.0, setup_s=1.0, save_s=0.25)}
    e = estimate(cfg, p, rates, {"per_trial_s": 3.0, "per_wave_s": 10.0}, slots=1)
    eval_s = cfg.pretrain.train.eval_tokens * len(e["valid_tokens"]) / 1000.0
    evals, saves = 2 + len(run.branches), len(run.snapshots) + 1 + 2 * len(run.branches)
    assert e["pretrain_s"] == pytest.approx(3 * 2.0 + (80 + 12) * 1.0 + evals * eval_s + saves * 0.5)


@pytest.mark.slow  # ~3 minutes on 2 cores: the real loop per item in two processes, and Tune's no-op trials
@pytest.mark.ray
def test_a_real_probe_measures_every_item(tmp_path, ray_local):
    cfg = load_job(SPEC, [f"run.root={tmp_path}", "sweep.seeds=[0]", "sweep.methods=[generic, mixture]",
                          "sweep.sizes=[d1]"])
    p = plan_sweep(cfg, check_data=False)
    e = probe_and_estimate(cfg, p)
    assert set(e["rates"]) == {"pretrain:generic:d1", "pretrain:mixture:d1", "specialize:d1"}
    assert all(r["step_s"] > 0 and r["eval_tokens_per_s"] > 0 for r in e["rates"].values())
    assert e["tune"]["per_trial_s"] >= 0 and e["total_s"] > e["pretrain_s"] > 0


def test_the_replay_on_several_machines_fills_their_slots(tmp_path):
    """Issue 66: `--nodes N` replays the plan on N machines like this one, N × the slots: never slower than one,
    and the list schedule of every slot (four seeds' runs of one method, each on a slot of its own at 4 × 1)."""
    from slm.tune.estimate import format_estimate

    cfg = load_job(SPEC, [f"run.root={tmp_path}", "sweep.seeds=[0, 1, 2, 3]", "sweep.methods=[generic]",
                          "pretrain.train.eval_every=0", "pretrain.train.checkpoint_every=0"])
    p = plan_sweep(cfg, check_data=False)
    rates = {"pretrain:generic:d2": Rate(step_s=1.0, eval_tokens_per_s=1000.0, setup_s=2.0, save_s=0.5),
             "specialize:d2": Rate(step_s=0.5, eval_tokens_per_s=2000.0, setup_s=1.0, save_s=0.25)}
    tune = {"per_trial_s": 3.0, "per_wave_s": 10.0}
    one, four = estimate(cfg, p, rates, tune, slots=1), estimate(cfg, p, rates, tune, slots=4)
    assert len(p.runs) == 4 and four["pretrain_s"] == pytest.approx(one["pretrain_s"] / 4)
    assert four["trials_s"] < one["trials_s"]
    shown = format_estimate({**one, "rates": {}, "tune": tune, "probe_s": 0.0,
                             "cluster": {"nodes": 4, **{k: four[k] for k in ("pretrain_s", "trials_s", "total_s")}}})
    assert "on 4 machines like this one (4 at once)" in shown and f"{one['total_s'] / four['total_s']:.2f}× faster" in shown


def test_the_replay_on_gpus_uses_their_measured_steps_between_two_bounds(tmp_path):
    """Issue 66: `--gpus 1 8 --gpu-rates benchmarks/results/gpu_h200.json` replays the second edition's plan with
    the H200's measured step times, N × 1/gpus_per_worker runs at once, bounded by runs as fast as alone and
    runs that split the device; a spec at other shapes than the GPU's measured ones is refused."""
    import json

    from slm.tune.estimate import format_estimate, on_gpus

    study = Path(__file__).parents[2] / "jobs" / "sweeps" / "study2.yaml"
    measured = json.loads((Path(__file__).parents[2] / "benchmarks" / "results" / "gpu_h200.json").read_text())
    cfg = load_job(study, [f"run.root={tmp_path}", "sweep.seeds=[0]", "pretrain.train.gpus_per_worker=0.125",
                           "specialize.train.gpus_per_worker=0.125"])
    p = plan_sweep(cfg, check_data=False)
    host = {k: Rate(step_s=0.2, eval_tokens_per_s=50_000.0, setup_s=2.0, save_s=0.1)
            for k in ["pretrain:generic:d1", "pretrain:importance:d1", "pretrain:mixture:d1", "pretrain:projected:d1",
                      "pretrain:soup:d1", "pretrain:generic:d2", "specialize:d1", "specialize:d2"]}
    tune = {"per_trial_s": 1.0, "per_wave_s": 5.0}
    g = on_gpus(cfg, p, host, tune, measured, (1, 8))
    assert g["device"] == "NVIDIA H200" and g["runs_per_gpu"] == 8 == g["trials_per_gpu"]
    one, eight = g["by_count"]["1"], g["by_count"]["8"]
    assert eight["alone"]["total_s"] < one["alone"]["total_s"] <= one["split"]["total_s"]
    assert eight["alone"]["total_s"] <= eight["split"]["total_s"]
    # the longest run bounds the makespan from below: d1's trunk and its branches at the H200's fp32 step
    d1 = next(r for r in p.runs if r.name == "generic-d1-seed0")
    assert eight["alone"]["pretrain_s"] >= (d1.steps + d1.branch_steps) * measured["study_sizes"]["d1"]["fp32"]["step_s"]
    shown = format_estimate({**estimate(cfg, p, host, tune, 2), "rates": {}, "tune": tune, "probe_s": 0.0, "gpus": g})
    assert "on NVIDIA H200 GPUs (8 runs, 8 trials to a GPU" in shown and "  8 GPUs: " in shown
    with pytest.raises(SystemExit, match=r"measured at batch × sequence × vocabulary \(32, 256, 1024\), this spec "
                                         r"pretrains at \(16, 256, 1024\)"):
        on_gpus(load_job(study, [f"run.root={tmp_path}", "pretrain.train.batch_size=16"]), p, host, tune, measured, (1,))
