"""Issue 64: `slm advise` over a table of several domains answers per domain — perplexities of different domains
are not comparable (asked without a domain over the second edition's table it crowned medical, the easiest domain,
and listed a legal soup as next best) — and every sentence of an answer names its domain."""
from pathlib import Path

import pytest

from slm.analysis.advise import advise, advise_each, format_advice, format_each
from slm.records.table import read_table

STUDY2 = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "study2_report"
ASK = dict(pretrain_budget=5e13, specialization_budget=5e13, inference_budget=3e5, domain_tokens=25000, domains=1)


@pytest.fixture(scope="module")
def answers() -> list[dict]:
    return advise_each(read_table(STUDY2), **ASK)


def test_one_answer_per_domain_from_that_domain_s_rows_only(answers):
    assert [a["domain"] for a in answers] == ["code", "legal", "medical"]
    for a in answers:
        d = a["domain"]
        settings = [a["answer"]["trial"], *(x["trial"] for x in a["answer"]["rivals"]), *(e["trial"] for e in a["evidence"])]
        assert all(f"-{d}-" in s for s in settings), settings
        assert all(p["domain"] == d for p in a["curves"]["predictions"])
    # At these budgets the soup is legal's answer; SLM-is code's and medical's.
    assert [a["answer"]["method"] for a in answers] == ["importance", "soup", "importance"]


def test_every_sentence_names_its_domain(answers):
    for a in answers:
        text = format_advice(a)
        prose = [line for line in text.splitlines() if line.strip() and not line.startswith("|")]
        assert all(a["domain"] in line for line in prose), [line for line in prose if a["domain"] not in line]
    assert format_each(answers).count("\n## ") == 2


def test_a_table_of_several_domains_needs_one_named():
    rows = read_table(STUDY2)
    with pytest.raises(ValueError, match=r"the table has 3 domains \(code, legal, medical\): name one"):
        advise(rows, **ASK)
    with pytest.raises(ValueError, match=r"no measured row for domain 'math' \(the table has code, legal, medical\)"):
        advise(rows, domain="math", **ASK)
    assert advise(rows, domain="legal", **ASK)["answer"]["method"] == "soup"


def test_a_quoted_advise_command_is_read_with_the_clis_own_arguments():
    """The docs' quoted answers are computed at the budgets their `slm advise` line asks (slm.analysis.advise_command,
    which the CLI parses with too): continuations and a venv path read as the shell would; anything else refused."""
    import argparse

    from slm.analysis.advise_command import budgets_of, parse_command

    asked = budgets_of(parse_command(".venv/bin/slm advise --sweep runs/x --pretrain-budget 3e12 \\\n"
                                     "    --specialization-budget 1e12 --inference-budget 1e7 --domain-tokens 40000"))
    assert asked == {"pretrain_budget": 3e12, "specialization_budget": 1e12, "inference_budget": 1e7,
                     "domain_tokens": 40000, "domains": 1, "domain": None, "unit": "flops"}
    with pytest.raises(ValueError, match="not an `slm advise` command"):
        parse_command("slm report runs/x")
    with pytest.raises(argparse.ArgumentError, match="--domains: invalid int value: 'four'"):
        parse_command("slm advise --sweep x --pretrain-budget 1 --specialization-budget 1 --inference-budget 1 "
                      "--domain-tokens 1 --domains four")
