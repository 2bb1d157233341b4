"""Budget sweeps: bad specs fail before anything runs; `advise` on a hand-checkable table; a tiny real
sweep on Ray Tune, SIGKILLed after its first trials and restored, finishes only the missing trials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from slm.config import ConfigError, load_job
from slm.tune.advise import advise
from slm.tune.report import pareto
from slm.tune.sweep import SweepSpecError, plan
from tests.conftest import REPO, train_overrides


def test_bad_sweep_specs_fail_before_any_trial(train_run):
    def spec(*extra):
        return load_job(None, train_overrides(train_run, "sweep.sizes=[tiny]", *extra))

    with pytest.raises(ConfigError, match="sweep.methods"):
        spec("sweep.methods=[generic, moe]")
    with pytest.raises(ConfigError, match="sweep.pretrain_steps': budgets must be positive"):
        spec("sweep.pretrain_steps=[0, 10]")
    with pytest.raises(ConfigError, match="sweep.domain_tokens"):
        spec("sweep.domain_tokens=[]")
    with pytest.raises(SweepSpecError, match="over sweep.inference_budget"):
        plan(spec("sweep.sizes=[tiny, d4]", "sweep.inference_budget=2e6"))
    with pytest.raises(SweepSpecError, match="'medical' has no packed train data"):
        plan(spec("sweep.domains=[legal, medical]"))
    with pytest.raises(SweepSpecError, match="sweep.sizes"):
        plan(spec("sweep.sizes=[huge]"))
    p = plan(spec("sweep.methods=[generic, importance]", "sweep.pretrain_steps=[10, 20]",
                  "sweep.domain_tokens=[1000, 2000]", "sweep.specialize_steps=[5]"))
    # pretraining is paid once per (method, size); SLM-is once per domain too; 2 × 2 trials each
    assert [r["name"] for r in p["runs"]] == ["generic-tiny", "importance-legal-tiny"]
    assert all(r["steps"] == 20 and r["snapshots"] == [10, 20] for r in p["runs"])
    assert len(p["trials"]) == 8 and p["estimate"]["total_flops"] > 0


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


def test_advise_picks_the_right_row():
    def ask(**kw):
        base = dict(pretrain_budget=1000, specialization_budget=1000, inference_budget=100, domain_tokens=10000)
        return advise(ROWS, **{**base, **kw})

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


@pytest.mark.ray
def test_tiny_sweep_killed_and_restored_runs_only_missing_trials(train_run, tmp_path):
    overrides = train_overrides(
        train_run, "sweep.name=tiny", "sweep.methods=[generic, soup]", "sweep.sizes=[tiny]",
        "sweep.pretrain_steps=[10, 20]", "sweep.domain_tokens=[3200]", "sweep.specialize_steps=[5]",
        "pretrain.train.num_workers=0", "specialize.train.num_workers=1", "specialize.train.checkpoint_every=0",
        "ray.include_dashboard=false", "ray.num_cpus=2")
    command = [sys.executable, "-m", "slm.cli", "sweep", "jobs/sweeps/quickstart.yaml", *overrides]
    out = train_run.run.dir / "sweeps" / "tiny"
    log = tmp_path / "first.log"
    with log.open("w") as f:
        proc = subprocess.Popen(command, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    finished_before_kill = []
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        done = sorted(p.parent.name for p in (out / "specialized" / "legal").glob("*-p*/manifest.json"))
        if len(done) >= 2:
            time.sleep(15)  # let Tune record them in its experiment state
            finished_before_kill = done
            os.killpg(proc.pid, signal.SIGKILL)  # the driver, its embedded Ray and every trial with it
            break
        time.sleep(1)
    proc.wait(timeout=60)
    assert finished_before_kill, log.read_text()[-3000:]
    started_first = [json.loads(line)["trial"] for line in (out / "trials.log").read_text().splitlines()]
    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resuming" in second.stdout
    started = [json.loads(line)["trial"] for line in (out / "trials.log").read_text().splitlines()]
    started_second = started[len(started_first):]
    assert not set(finished_before_kill) & set(started_second), (finished_before_kill, started_second)
    table = pq.read_table(out / "results.parquet").to_pylist()
    assert sorted(r["trial"] for r in table) == sorted(
        f"{m}-tiny-p{p}-t3200-s5" for m in ("generic", "soup") for p in (10, 20))
    for r in table:
        assert r["perplexity"] > 1 and 0 <= r["accuracy"] <= 1
        assert r["pretrain_flops"] > 0 and r["specialize_flops"] > 0 and r["generic_flops"] == r["pretrain_flops"]
    by = {r["trial"]: r for r in table}
    assert by["generic-tiny-p20-t3200-s5"]["pretrain_flops"] == 2 * by["generic-tiny-p10-t3200-s5"]["pretrain_flops"]
    assert (out / "results.csv").exists()
    assert {p.name for p in (out / "report").glob("*.png")} == {
        "pretrain_cost.png", "specialize_cost.png", "inference_size.png", "domain_tokens.png"}
    assert "Pareto-optimal" in (out / "report" / "summary.md").read_text()
