"""A design's power per claim from a measured table's noise (issue 45): ``slm sweep --dry-run --noise-from``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from slm.analysis.power import design_power, measured_noise
from tests.analysis.test_claims import holding, study_plan, table

REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    root = tmp_path_factory.mktemp("power")
    return {n: study_plan(root / str(n), "sweep.domains=[legal]", "sweep.domain_tokens=[1000]",
                          "sweep.specialize_steps=[10]", seeds=list(range(n))) for n in (3, 8)}


def test_the_noise_measured_is_the_noise_the_table_was_made_with(plans):
    """Tables of known noise: a paired comparison's seed difference has sd spread·√(2·(1 − shared)) (the
    shared part cancels), relative to b's level; the median over a claim's comparisons finds it."""
    plan = plans[8]
    found = []
    for seed in range(5):
        rows = table(plan, holding, spread=1.0, paired_share=0.5, rng=np.random.default_rng(seed))
        noise = {(x.claim, x.measure, x.expected): x for x in measured_noise(rows, plan)}
        c1 = noise[("C1", "perplexity", "lower")]
        assert c1.paired and c1.comparisons == 5
        found.append(c1.relative_sd * 40.0)  # C1 compares at the largest budget, b's level ≈ 40 ppl
    assert np.median(found) == pytest.approx(1.0, rel=0.25)  # √(2 · 0.5) = 1


def test_power_grows_with_seeds_and_falls_with_noise(plans):
    rows = table(plans[3], holding, spread=1.0, rng=np.random.default_rng(0))
    noises = measured_noise(rows, plans[3])
    by = {p.claim: p for p in design_power(plans[3], noises, tables=200)}
    more = {p.claim: p for p in design_power(plans[8], noises, tables=200)}
    assert more["C1"].power["5%"] > by["C1"].power["5%"] and more["C1"].power["10%"] >= 0.9
    assert by["C1"].seeds_for["10%"] is not None and by["C1"].seeds_for["10%"] <= 8
    # no curves in the table: C5's noise is not measured, and its power is said to be unknown, not guessed
    assert by["C5"].comparisons == 1 and by["C5"].power == {"5%": None, "10%": None}
    quiet = measured_noise(table(plans[3], holding, spread=0.1, rng=np.random.default_rng(0)), plans[3])
    assert {p.claim: p for p in design_power(plans[3], quiet, tables=200)}["C1"].power["5%"] > by["C1"].power["5%"]


@pytest.mark.slow
def test_the_dry_run_prints_each_claim_s_power():
    out = subprocess.run([str(Path(sys.executable).with_name("slm")), "sweep", "jobs/sweeps/quickstart.yaml", "--dry-run",
                          "--noise-from", "benchmarks/results/study_report"], cwd=REPO, capture_output=True, text=True,
                         timeout=900, check=True).stdout
    assert "power per claim" in out and "C1:" in out and "seeds for 80%" in out
