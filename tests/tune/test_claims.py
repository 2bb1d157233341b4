"""The claims check's verdict logic on hand-made results tables (issue 16): each claim made to hold, made
to fail, and left within noise; a table at one seed and one without the rows a claim needs."""

from __future__ import annotations

import itertools
import json

import pytest

from slm.tune.claims import compare, evaluate, markdown, write_claims
from slm.tune.results import MEANS, aggregate

METHODS = ["generic", "importance", "mixture", "projected", "soup"]
PRETRAIN = [100, 200, 400]
SIZES = {"d2": 1_000_000, "d4": 4_000_000}


def holds(method: str, size: str, pretrain: int, domain: str, tokens: int, steps: int) -> tuple[float, float]:
    """(perplexity, perplexity before specialization) of a world where C1–C3 hold by wide margins."""
    base = 60.0 - 10 * PRETRAIN.index(pretrain) - (5 if size == "d4" else 0) - (3 if tokens > 1000 else 0)
    after = {"generic": base, "importance": base - 6 if tokens == 1000 else base + 1,
             # the cluster-aware methods lose at the smallest budget and win at the largest
             "mixture": base + 4 if pretrain == 100 else base - 4,
             "projected": base + 4 if pretrain == 100 else base - 3, "soup": base + 1}[method]
    before = {"generic": 90.0 - 10 * PRETRAIN.index(pretrain), "soup": 80.0 - 12 * PRETRAIN.index(pretrain)}
    return after, before.get(method, 100.0)


def table(world, seeds: int = 3, spread: float = 1.0, methods=METHODS) -> list[dict]:
    """Trials as a sweep writes them: every setting of the grid at each seed, seed i shifted by
    (i − 1)·spread, so each setting's standard error is spread/√3 at three seeds."""
    rows = []
    for method, size, pretrain, domain, tokens, steps in itertools.product(
            methods, SIZES, PRETRAIN, ["legal", "medical"], [1000, 8000], [10, 40]):
        after, before = world(method, size, pretrain, domain, tokens, steps)
        setting = f"{method}-{size}-p{pretrain}-{domain}-t{tokens}-s{steps}"
        for seed in range(seeds):
            shift = (seed - 1) * spread if seeds > 1 else 0.0
            rows.append({**dict.fromkeys(MEANS, 0.0), "method": method, "size": size, "expert": None, "params": SIZES[size],
                         "inference_flops_per_token": 2 * SIZES[size], "pretrain_steps": pretrain, "domain": domain,
                         "domain_tokens": tokens, "specialize_steps": steps, "perplexity": after + shift,
                         "perplexity_before": before + shift, "accuracy": 0.1, "setting": setting, "seed": seed,
                         "trial": f"{setting}-seed{seed}"})
    return aggregate(rows)


def verdicts(rows) -> dict[str, str]:
    return {c.id: c.verdict for c in evaluate(rows)}


def test_each_comparison_kind_reads_the_difference_against_its_noise():
    a = {"setting": "a", "perplexity": 20.0, "perplexity_se": 0.5}
    b = {"setting": "b", "perplexity": 22.0, "perplexity_se": 0.5}  # 2.0 ± 0.71: separable
    close = {"setting": "c", "perplexity": 20.5, "perplexity_se": 0.5}  # 0.5 ± 0.71: a tie
    one_seed = {"setting": "d", "perplexity": 30.0, "perplexity_se": None}
    assert compare("", a, b, "lower").verdict == "holds" and compare("", b, a, "lower").verdict == "does not hold"
    assert compare("", a, close, "lower").verdict == "inconclusive"
    assert compare("", a, b, "not lower").verdict == "does not hold" and compare("", b, a, "not lower").verdict == "holds"
    assert compare("", a, close, "not lower").verdict == "holds" and compare("", a, close, "not higher").verdict == "holds"
    assert compare("", b, a, "not higher").verdict == "does not hold"
    assert compare("", a, close, "tie").verdict == "holds" and compare("", a, b, "tie").verdict == "does not hold"
    assert compare("", a, one_seed, "lower").verdict == "inconclusive"  # 10 ppl, but the spread is unknown
    c = compare("part", a, b, "lower")
    assert c.difference == pytest.approx(2.0) and c.se == pytest.approx(0.5 * 2 ** 0.5)


def test_claims_hold_in_a_world_built_to_satisfy_them(tmp_path):
    rows = table(holds)
    claims = {c.id: c for c in evaluate(rows)}
    assert verdicts(rows) == {"C1": "holds", "C2": "holds", "C3": "holds",
                              "C4": "inconclusive", "C5": "inconclusive", "C6": "inconclusive"}
    # C1: 2 domains × 2 specialization budgets, at the small size, 1,000 tokens, 400 pretraining steps
    assert len(claims["C1"].comparisons) == 4
    assert all("-d2-p400-" in c.a and "-t1000-" in c.a and c.a.startswith("importance") for c in claims["C1"].comparisons)
    # C2: 2 domains × 2 data sizes × 2 budgets × (mixture, projected) at the smallest specialization budget
    assert len(claims["C2"].comparisons) == 16 and all(c.a.endswith("-s10") for c in claims["C2"].comparisons)
    # C3: every budget on each domain, plus the soup at 200 (≤ 0.6 × 400) against generic at 400
    reach = [c for c in claims["C3"].comparisons if c.expected == "not higher"]
    assert len(claims["C3"].comparisons) == 2 * 3 + 2 and all("-p200-" in c.a and "-p400-" in c.b for c in reach)
    assert all(c.measure == "perplexity_before" for c in claims["C3"].comparisons)
    assert "sweep plans no distillation" in claims["C4"].missing and not claims["C4"].comparisons
    assert "no SALT run" in claims["C5"].missing and "sweep.all_experts" in claims["C6"].missing
    write_claims(rows, tmp_path)
    text = (tmp_path / "claims.md").read_text()
    assert "| C1 | Plan-Early | **holds** | 4 / 0 / 0 |" in text and "not tested: the sweep has no SALT run" in text
    assert json.loads((tmp_path / "claims.json").read_text())[1]["verdict"] == "holds"


def test_a_claim_fails_when_a_separable_difference_goes_the_wrong_way():
    def mixture_wins_early(*args):
        after, before = holds(*args)
        return (after - 8 if args[0] == "mixture" and args[2] == 100 else after), before

    def soup_reaches_late(*args):
        after, before = holds(*args)
        return after, (before + 15 if args[0] == "soup" and args[2] == 200 else before)

    assert verdicts(table(mixture_wins_early))["C2"] == "does not hold"
    assert verdicts(table(soup_reaches_late))["C3"] == "does not hold"


def test_within_noise_and_at_one_seed_the_verdict_is_inconclusive():
    def slm_is_by_a_hair(*args):
        after, before = holds(*args)
        return (after + 1.5 if args[0] == "importance" and args[4] == 1000 else after), before  # 0.5 under mixture

    rows = table(slm_is_by_a_hair)
    c1 = next(c for c in evaluate(rows) if c.id == "C1")
    assert c1.verdict == "inconclusive" and {c.verdict for c in c1.comparisons} == {"inconclusive"}
    one_seed = table(holds, seeds=1)
    assert verdicts(one_seed) == dict.fromkeys(["C1", "C2", "C3", "C4", "C5", "C6"], "inconclusive")
    assert "spread unknown" in markdown(evaluate(one_seed))


def test_a_table_without_a_claims_rows_says_what_is_missing():
    claims = {c.id: c for c in evaluate(table(holds, methods=["generic", "importance", "soup"]))}
    assert claims["C1"].verdict == "holds"
    assert claims["C2"].verdict == "inconclusive" and claims["C2"].missing.startswith("the table has no mixture, projected rows")
    assert "Not tested by this table: the table has no mixture, projected rows" in markdown(list(claims.values()))


def cell_rows(method: str, values: list[float], *, expert=None, flops=(0.0, 0.0), pretrain=400, tokens=1000,
              steps=10, domain="legal", spread: float = 1.0) -> list[dict]:
    """One setting at three seeds around ``values[i]`` (seed i), as a sweep writes them."""
    setting = f"{method}-d2-p{pretrain}-t{tokens}-s{steps}" + ("" if expert is None else f"-e{expert}")
    return [{**dict.fromkeys(MEANS, 0.0), "method": method, "size": "d2", "expert": expert, "params": SIZES["d2"],
             "inference_flops_per_token": 2 * SIZES["d2"], "pretrain_steps": pretrain, "domain": domain,
             "domain_tokens": tokens, "specialize_steps": steps, "perplexity": v + (i - 1) * spread,
             "perplexity_before": 100.0, "accuracy": 0.1, "generic_flops": flops[0], "per_domain_flops": flops[1],
             "setting": setting, "seed": i, "trial": f"{setting}-seed{i}"} for i, v in enumerate(values)]


def test_c4_distillation_pays_only_when_it_beats_what_its_cost_buys_otherwise():
    def world(distilled: float) -> dict:
        rows = [*cell_rows("generic", [40] * 3, flops=(100, 10)), *cell_rows("generic", [35] * 3, pretrain=800, flops=(200, 10)),
                *cell_rows("soup", [30] * 3, pretrain=800, flops=(900, 10)),  # better, but dearer than the student
                *cell_rows("distill", [distilled] * 3, flops=(100 + 500, 10 + 20))]
        return {c.id: c for c in evaluate(aggregate(rows))}["C4"]

    c4 = world(distilled=36.0)  # no better than generic pretrained twice as long, at 210 vs 630 FLOPs
    assert c4.verdict == "holds" and len(c4.comparisons) == 1
    assert "-p800-" in c4.comparisons[0].b and c4.comparisons[0].difference == pytest.approx(-1.0)
    assert world(distilled=35.5).verdict == "holds"  # a tie: it does not pay
    assert world(distilled=30.0).verdict == "does not hold"  # 5 ± 0.8 ppl better than anything at its cost


def curve(role: str, run: str, seed, losses: list[float], every: int = 100) -> list[dict]:
    return [{"run": f"{run}-seed{seed}", "role": role, "method": "generic", "size": "d4", "seed": seed,
             "step": every * (i + 1), "tokens": 0, "flops": 0.0, "loss": x, "perplexity": 0.0, "accuracy": 0.0}
            for i, x in enumerate(losses)]


def test_c5_salt_reads_the_steps_to_the_baselines_final_loss_from_the_curves():
    rows = table(holds)
    baseline = [5.0, 4.6, 4.4, 4.3, 4.2, 4.15, 4.1, 4.05, 4.02, 4.0]  # 1,000 steps, final loss 4.0

    def c5(salts: list[list[float]]):
        curves = [c for seed, salt in enumerate(salts) for c in curve("large", "generic-d4", seed, baseline)
                  + curve("salt", "salt-d4", seed, salt)]
        return {c.id: c for c in evaluate(rows, curves)}["C5"]

    early = [[4.5, 4.2, 4.1, 4.05, 4.0 - d, 3.9, 3.9, 3.9, 3.9, 3.9] for d in (0.0, 0.01, 0.02)]  # at step 500
    claim = c5(early)
    assert claim.verdict == "holds" and claim.comparisons[0].a_value == pytest.approx(0.5)
    assert claim.comparisons[0].a == "salt-d4" and "0.500, 0.500, 0.500" in claim.comparisons[0].part
    late = [[4.9, 4.5, 4.3, 4.2, 4.15, 4.1, 4.05, 4.03, 4.0 - d, 3.99] for d in (0.0, 0.001, 0.002)]  # at step 900
    assert c5(late).verdict == "does not hold"
    never = [[4.9, 4.5, 4.3, 4.2, 4.15, 4.1, 4.08, 4.06, 4.05, 4.04]] * 3
    assert c5(never).verdict == "does not hold" and c5(never).comparisons[0].a_value == 1.0
    mixed = [early[0], late[0], never[0]]  # 0.5, 0.9, 1.0: 0.8 within the noise
    assert c5(mixed).verdict == "inconclusive"
    assert c5(early[:1]).verdict == "inconclusive"  # one seed: the spread is unknown


def test_c6_the_most_frequent_expert_against_the_best_of_all_fine_tuned():
    def c6(best_other: float):
        rows = [*cell_rows("mixture", [30] * 3),  # the grid's trial: the most frequent cluster's expert (2)
                *cell_rows("mixture", [30] * 3, expert=2), *cell_rows("mixture", [33] * 3, expert=0),
                *cell_rows("mixture", [best_other] * 3, expert=1)]
        return {c.id: c for c in evaluate(aggregate(rows))}["C6"]

    assert c6(best_other=29.5).verdict == "holds"  # 0.5 ± 1.2: within noise
    assert c6(best_other=31.0).comparisons[0].b.endswith("-e2")  # the most frequent is itself the best
    assert c6(best_other=31.0).verdict == "holds"
    claim = c6(best_other=25.0)
    assert claim.verdict == "does not hold" and claim.comparisons[0].b.endswith("-e1")
