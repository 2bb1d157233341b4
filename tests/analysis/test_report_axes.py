"""The frontier figures' perplexity axis: log, labelled in plain numbers, with labels inside the data however
narrow its span (SLM-mix at 300 beside methods a few percent apart at 15-50 is the study's case)."""

from __future__ import annotations

import pytest

from slm.analysis.report import _distinct_ticks, _log_y, _pyplot


def labels_inside(ys: list[float]) -> list[str]:
    plt = _pyplot()
    fig, ax = plt.subplots()
    try:
        ax.plot(range(len(ys)), ys, "o")
        _log_y(ax, ys)
        fig.canvas.draw()
        assert ax.get_yscale() == "log"
        lo, hi = ax.get_ylim()
        return [t.get_text() for t, v in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True) if lo <= v <= hi]
    finally:
        plt.close(fig)


@pytest.mark.parametrize(("ys", "expected"), [
    ([12.0, 19.0, 48.0, 290.0], ["20", "50", "100", "200"]),   # the study's range: 1-2-5 in each decade
    ([21.0, 26.0, 33.0], ["21", "24.4", "28.4", "33"]),         # under 3×: four across the data
    ([299.0, 640.0, 3785.0], ["500", "1000", "2000"]),          # the quickstart's range, no 10³ notation
])
def test_the_perplexity_axis_is_log_with_plain_labels(ys, expected):
    labels = labels_inside(ys)
    assert set(expected) <= set(labels) and len(labels) >= 3, labels
    assert all("$" not in t and "^" not in t for t in labels), labels  # no mathtext 10^x labels


@pytest.mark.parametrize(("lo", "hi", "count"), [
    (3.0e12, 7.0e12, 4),        # under a decade: four labels at two digits
    (3.872e13, 3.919e13, 2),    # the study's d2 panels (their settings differ by specialization FLOPs): the ends
    (1.0e13, 1.0001e13, 2),     # narrower still: the ends, at the digits they need
    (5.0e12, 5.0e12, 1),        # one cost
])
def test_cost_ticks_have_distinct_labels(lo, hi, count):
    ticks, digits = _distinct_ticks(lo, hi)
    labels = [f"{v:.{digits}g}" for v in ticks]
    assert len(ticks) == count and len(set(labels)) == count, labels
    assert ticks[0] == pytest.approx(lo) and ticks[-1] == pytest.approx(hi)
