"""Documentation that must not drift from the code."""

import dataclasses
import typing
from pathlib import Path

from slm.job import JobConfig

REPO = Path(__file__).resolve().parents[1]


def _keys(cls, prefix=""):
    """Every config key, as YAML writes it: registered sections (a method's settings) under their names."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "registry" in f.metadata:
            for name, section in f.metadata["registry"].defaults().items():
                yield from _keys(type(section), f"{prefix}{name}.")
        elif dataclasses.is_dataclass(hints[f.name]):
            yield from _keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


def test_every_config_key_is_documented():
    text = (REPO / "docs" / "config.md").read_text()
    missing = [k for k in _keys(JobConfig) if f"`{k}`" not in text]
    assert not missing, f"docs/config.md lacks {missing}"


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = ci.strip().splitlines()[-1]
    assert command in readme
    assert "slm run jobs/quickstart.yaml" in readme


def test_the_advice_quoted_in_the_docs_is_what_the_command_prints():
    """Issue 46: quoted outputs went stale when what produced them changed. docs/budgets.md's advice is the
    command's output on a committed table, checked here line for line."""
    import re

    from slm.analysis.advise import advise_sweep, format_each
    from slm.analysis.advise_command import budgets_of, parse_command

    text = (REPO / "docs" / "budgets.md").read_text()
    command = re.search(r"## Advice\n.*?```bash\n(.*?)```", text, re.S).group(1)
    quoted = re.search(r"## Advice\n.*?```text\n(.*?)```", text, re.S).group(1).splitlines()
    asked = budgets_of(parse_command(command))  # the budgets as the page's command writes them
    printed = format_each(advise_sweep(REPO / "benchmarks" / "results" / "quickstart_wsd", **asked)).splitlines()
    assert quoted == printed[:len(quoted)]


def test_the_method_lists_are_the_registry_s():
    """Issue 65: the method lists in docs/config.md and docs/training.md were typed by hand; a shipped method
    missing from them (or one listed that is not registered) fails here."""
    import re

    from slm import methods

    shipped = set(methods.names())
    config = (REPO / "docs" / "config.md").read_text()
    row = next(line for line in config.splitlines() if line.startswith("| `pretrain.method` |"))
    assert set(re.findall(r"`([a-z_]+)`", row.split("|")[3])) == shipped, row
    swept = {m for m in shipped if methods.get(m).swept_by_default}
    row = next(line for line in config.splitlines() if line.startswith("| `sweep.methods` |"))
    named = row.split("swept by default")[1].split(";")[0]
    assert set(re.findall(r"`([a-z_]+)`", named)) == swept, row
    training = (REPO / "docs" / "training.md").read_text()
    knobs = training[training.index("## Methods and their knobs"):training.index("## The objective")]
    assert shipped <= set(re.findall(r"`pretrain\.method: ([a-z_]+)`", knobs)), knobs[:400]
