"""The sweep's plan on its own (``slm.tune.plan``): frozen dataclasses from a spec and hand-given facts, no
run directory, no Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace

import pytest

from slm.config import ConfigError
from slm.records.plan import Plan, SizeCost
from slm.tune.config import SweepConfig
from slm.tune.plan import PlanInputs, SweepSpecError, format_plan, make_plan

INPUTS = PlanInputs(domains=("legal", "medical"),
                    sizes={"d1": SizeCost(6.0, 2.0), "d2": SizeCost(18.0, 6.0)},
                    pretrain_tokens_per_step=100, specialize_tokens_per_step=10, experts=3,
                    peak_flops=1e6, peak_flops_source="given")


def spec(**changes) -> SweepConfig:
    base = SweepConfig(methods=["generic", "importance", "mixture"], sizes=["d1"], pretrain_steps=[20, 10],
                       domain_tokens=[1000], specialize_steps=[5], seeds=[0, 1])
    return replace(base, **changes)


def test_the_grid_pays_pretraining_once_and_a_per_domain_method_per_domain():
    p = make_plan(spec(), INPUTS)
    assert [r.name for r in p.runs] == ["generic-d1-seed0", "generic-d1-seed1", "importance-legal-d1-seed0",
                                        "importance-legal-d1-seed1", "importance-medical-d1-seed0",
                                        "importance-medical-d1-seed1", "mixture-d1-seed0", "mixture-d1-seed1"]
    assert all(r.steps == 20 and r.snapshots == (10, 20) and r.role == "grid" for r in p.runs)
    # per seed: generic and mixture 2 budgets × 2 domains, SLM-is 2 budgets × its own domain, twice
    assert len(p.trials) == 2 * (4 + 4 + 2 + 2)
    one = next(t for t in p.trials if t.name == "generic-d1-medical-p10-t1000-s5-seed1")
    assert (one.source, one.pretrain_steps, one.domain, one.setting) == (
        "generic-d1-seed1", 10, "medical", "generic-d1-medical-p10-t1000-s5")
    # FLOPs: 6 per token × 100 tokens a step × 20 steps; a trial 6 × 10 × 5
    assert p.run("generic-d1-seed0").flops == 6.0 * 100 * 20 and one.flops == 6.0 * 10 * 5
    assert p.estimate.total_flops == sum(r.flops for r in p.runs) + sum(t.flops for t in p.trials)
    assert p.estimate.device_seconds == pytest.approx(p.estimate.total_flops / (1e6 * 0.1))


def test_the_claims_experiments_and_their_costs():
    p = make_plan(spec(large_size="d2", large_steps=8, distill=True, salt_kd_share=0.25, all_experts=True), INPUTS)
    salt = p.run("salt-d2-seed1")
    assert (salt.teacher, salt.kd_steps, salt.steps, salt.eval_every) == ("generic-d1-seed1", 2, 8, 1)
    # the student's forward on each KD step is paid at the small model's inference FLOPs
    assert salt.flops == 18.0 * 100 * 8 + 2.0 * 100 * 2
    assert [r.name for r in p.runs][-2:] == ["salt-d2-seed0", "salt-d2-seed1"]  # after their teachers
    student = next(t for t in p.trials if t.role == "distill" and t.seed == 0)
    assert (student.wave, student.pretrain_steps, student.teacher_run) == (2, 20, "generic-d2-seed0")
    teacher = next(t for t in p.trials if t.name == student.teacher)
    assert (teacher.role, teacher.pretrain_steps, teacher.size) == ("teacher", 8, "d2")
    assert student.flops == 6.0 * 10 * 5 + 6.0 * 10 * 5  # its own training + the d2 teacher's forward
    assert sorted(t.expert for t in p.trials if t.role == "experts" and t.seed == 0 and t.domain == "legal") == [0, 1, 2]
    assert [w for w, _ in p.waves()] == [1, 2]


def test_a_plan_trains_only_what_some_trial_or_claim_reads_and_says_what():
    """Issue 46: with `sweep.distill=false` (and no SALT) the large model was still pretrained for every
    seed, read by nothing. The dry run says for each run what reads it."""
    bare = make_plan(spec(large_size="d2", large_steps=8), INPUTS)
    assert not [r for r in bare.runs if r.size == "d2"]
    distilled = make_plan(spec(large_size="d2", large_steps=8, distill=True, distill_steps=10), INPUTS)
    assert [r.name for r in distilled.runs if r.size == "d2"] == ["generic-d2-seed0", "generic-d2-seed1"]
    assert {t.pretrain_steps for t in distilled.trials if t.role == "distill"} == {10}  # sweep.distill_steps
    text = format_plan(distilled)
    assert "generic-d2-seed0" in text and "2 teacher trials (C1, C4); its specializations teach 2 students" in text
    assert "generic-d1-seed0" in text and "4 trials; 2 distilled students (C4)" in text
    salt = format_plan(make_plan(spec(large_size="d2", large_steps=8, salt_kd_share=0.25), INPUTS))
    assert "teaches salt-d2-seed0 (SALT)" in salt and "nothing reads it" not in salt


def test_bad_specs_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match="sweep.methods': unknown method 'moe'"):
        make_plan(spec(methods=["generic", "moe"]), INPUTS)
    with pytest.raises(SweepSpecError, match="sweep.inference_budget"):
        make_plan(spec(inference_budget=1.0), INPUTS)
    with pytest.raises(SweepSpecError, match="'sweep.large_size': 'd1' is not larger"):
        make_plan(spec(sizes=["d2", "d1"], large_size="d1", distill=True), INPUTS)
    with pytest.raises(SweepSpecError, match="sweep.all_experts"):
        make_plan(spec(methods=["generic"], all_experts=True), INPUTS)


def test_parts_partition_the_design_and_train_what_they_need():
    """Issue 29: a part owns some pretraining runs; it trains them and the runs they need (not owned: their
    trials and curves are the owner's), and runs every trial that starts from what it owns (distillation
    with its teacher). A partition of the runs gives every trial exactly once."""
    design = spec(large_size="d2", large_steps=8, distill=True, salt_kd_share=0.25, all_experts=True)
    whole = make_plan(design, INPUTS)
    groups = [["generic-d1", "importance-legal-d1"], ["importance-medical-d1", "mixture-d1"], ["generic-d2"],
              ["salt-d2"]]
    parts = [make_plan(replace(design, part=g), INPUTS) for g in groups]
    names = [t.name for p in parts for t in p.trials]
    assert sorted(names) == sorted(t.name for t in whole.trials) and len(set(names)) == len(names)
    assert {r.name for p in parts for r in p.runs if r.owned} == {r.name for r in whole.runs}
    large, salt = parts[2], parts[3]
    # the large part: its teacher trials and the distilled students, whose start (generic-d1) it trains too
    assert {t.role for t in large.trials} == {"teacher", "distill"}
    assert {(r.name, r.owned) for r in large.runs} == {("generic-d2-seed0", True), ("generic-d2-seed1", True),
                                                       ("generic-d1-seed0", False), ("generic-d1-seed1", False)}
    assert {(r.name, r.owned) for r in salt.runs} == {("salt-d2-seed0", True), ("salt-d2-seed1", True),
                                                      ("generic-d1-seed0", False), ("generic-d1-seed1", False)}
    assert salt.trials == () and [r.name for r in salt.runs][-1].startswith("salt")  # teachers first
    assert "mixture-d1-seed0" in {t.source for t in parts[1].trials if t.role == "experts"}  # C6 with its run
    assert parts[0].estimate.total_flops == sum(r.flops for r in parts[0].runs) + sum(t.flops for t in parts[0].trials)
    with pytest.raises(SweepSpecError, match=r"'sweep.part': \['soup-d1'\] are not pretraining runs of this design; "
                                             r"its runs: \['generic-d1', 'generic-d2', 'importance-legal-d1'"):
        make_plan(replace(design, part=["soup-d1"]), INPUTS)


def test_a_plan_is_frozen_and_survives_its_json():
    p = make_plan(spec(large_size="d2", distill=True), INPUTS, {"legal": 1.5})
    again = Plan.from_json(json.loads(json.dumps(p.to_json())))
    assert again == p
    with pytest.raises(FrozenInstanceError):
        p.runs[0].steps = 1


def test_planning_starts_no_ray():
    code = "import sys, slm.tune.plan; print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_under_wsd_each_smaller_budget_is_a_cooldown_branch_paid_per_budget():
    """``pretrain.train.optim.schedule: wsd``: a grid run trains its largest budget (the trunk) and each
    smaller one as a branch of its decay's steps (decay_fraction × the budget); the plan pays them all,
    names them in ``--dry-run``, and ``plan.json`` keeps them. The large runs have no smaller budget."""
    wsd = replace(INPUTS, decay_fraction=0.2)
    p = make_plan(spec(pretrain_steps=[20, 10, 5], large_size="d2", large_steps=30, distill=True), wsd)
    grid = [r for r in p.runs if r.role == "grid"]
    assert grid and all(r.branches == (5, 10) and r.branch_steps == 1 + 2 for r in grid)
    generic = p.run("generic-d1-seed0")
    assert generic.flops == 6.0 * 100 * (20 + 3)  # the trunk's 20 steps and the branches' 1 + 2
    assert make_plan(spec(pretrain_steps=[20, 10, 5]), INPUTS).run("generic-d1-seed0").flops == 6.0 * 100 * 20
    large = p.run("generic-d2-seed0")
    assert large.branches == () and large.flops == 18.0 * 100 * 30
    assert Plan.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert "branches [5, 10] (+3 steps)" in format_plan(p) and "cooldown branch" in format_plan(p)
