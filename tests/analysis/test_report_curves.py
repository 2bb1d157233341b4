"""`slm report`'s pretraining curves: the figure of every run's valid loss against its steps, and the generic
model's saturation in summary.md (the study's precondition for C1-C3: < 1% over the last doubling)."""

from __future__ import annotations

import pytest

from slm.analysis.report import SATURATED, report, saturation
from slm.records.table import SWEEP_TABLES, read_curves
from tests.analysis.test_report_tables import RESULTS_STUDY, part


def curve(run: str, seed: int, losses: dict[int, float], method: str = "generic", size: str = "d1") -> list[dict]:
    return [{"run": run, "role": "grid", "method": method, "size": size, "seed": seed, "step": step,
             "tokens": step * 1024, "flops": step * 1e9, "loss": loss, "perplexity": 2.718 ** loss, "accuracy": 0.3}
            for step, loss in losses.items()]


def test_saturation_reads_the_last_doubling_of_each_generic_small_run():
    curves = (curve("generic-d1-seed0", 0, {1000: 5.0, 2000: 4.00, 3000: 3.99, 4000: 3.98})      # -0.5%
              + curve("generic-d1-seed1", 1, {1000: 5.0, 2000: 4.00, 4000: 3.90})                # -2.5%
              + curve("generic-d1-seed2", 2, {1500: 4.5, 4000: 3.9})                             # no 2,000
              + curve("generic-d2-seed0", 0, {600: 4.0, 1200: 3.0}, size="d2")                   # not the small
              + curve("soup-d1-seed0", 0, {2000: 4.0, 4000: 3.0}, method="soup"))                # not generic
    rows = {r["run"]: r for r in saturation(curves, "d1")}
    assert sorted(rows) == ["generic-d1-seed0", "generic-d1-seed1", "generic-d1-seed2"]
    assert rows["generic-d1-seed0"]["change"] == pytest.approx(-0.005) and rows["generic-d1-seed0"]["saturated"]
    assert rows["generic-d1-seed1"]["change"] == pytest.approx(-0.025) and rows["generic-d1-seed1"]["saturated"] is False
    assert rows["generic-d1-seed2"]["change"] is None and rows["generic-d1-seed2"]["saturated"] is None
    assert abs(rows["generic-d1-seed1"]["change"]) > SATURATED > abs(rows["generic-d1-seed0"]["change"])


def test_the_report_draws_the_curves_and_says_whether_the_generic_model_saturated(tmp_path):
    """On study part a as committed (seed 0: the generic d1 run, the d2 baseline and its SALT run)."""
    folder = tmp_path / "seed0-a"
    folder.mkdir()
    for name in SWEEP_TABLES:
        (folder / name).write_bytes((RESULTS_STUDY / "seed0-a" / name).read_bytes())
    result = report(folder)
    assert "pretrain_curves.png" in result["plots"]
    assert (folder / "report" / "pretrain_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    expected = saturation(read_curves(folder), "d1")
    assert [r["run"] for r in expected] == ["generic-d1-seed0"]
    row = expected[0]
    assert (row["steps"], row["half_steps"]) == (4000, 2000) and row["saturated"] is not None
    summary = (folder / "report" / "summary.md").read_text()
    assert f"| generic-d1-seed0 | 4,000 | {row['half_loss']:.4f} (2,000) | {row['loss']:.4f} | {row['change']:+.2%} |" \
        in summary
    assert "pretrain_curves.png" in (folder / "report" / "report.html").read_text()


def test_a_sweep_without_curves_has_neither_figure_nor_saturation(tmp_path):
    folder = part(tmp_path, "sweep", {0})
    result = report(folder)
    assert "pretrain_curves.png" not in result["plots"]
    assert "saturation" not in (folder / "report" / "summary.md").read_text()


def test_under_wsd_the_saturation_is_read_from_the_fully_trained_budgets_only(tmp_path):
    """Issue 46: a WSD sweep's summary.md read the trunk's evaluation at half its steps (learning rate at its
    peak) against its decayed end, −4.32% "not saturated", beside the curve's −1.10% from the fully trained
    budgets. The second edition's committed part is a WSD sweep: only the curve's line is left."""
    import shutil
    from pathlib import Path

    part = Path(__file__).parents[2] / "benchmarks" / "results" / "study2" / "seed0-a"
    for name in (*SWEEP_TABLES, "plan.json"):
        if (part / name).exists():
            shutil.copy2(part / name, tmp_path / name)
    report(tmp_path, tmp_path / "report")
    text = (tmp_path / "report" / "summary.md").read_text()
    assert "| run | steps | loss at half |" not in text
    assert "from the curve through its fully trained budgets" in text
