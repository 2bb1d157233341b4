"""Stages are declared in their own modules (issue 65): ``slm.stages`` holds one module per stage, each registering
itself, and ``slm.pipeline`` knows none by name — a stage added by one ``@stage`` runs in a job, is checked before
it (its domains, its loggers) and names itself in the dashboard, with no edit elsewhere."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from slm.config import ConfigError
from slm.job import load_job
from slm.stages import STAGES, stage

PACKAGE = Path(__file__).resolve().parents[1] / "platform" / "slm"


def test_each_stage_module_registers_the_stage_it_is_named_after():
    modules = sorted(p.stem for p in (PACKAGE / "stages").glob("*.py") if p.stem != "__init__")
    assert sorted(STAGES.names()) == modules
    for name in modules:
        decorators = [d for node in ast.walk(ast.parse((PACKAGE / "stages" / f"{name}.py").read_text()))
                      if isinstance(node, ast.FunctionDef) for d in node.decorator_list
                      if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "stage"]
        assert [d.args[0].value for d in decorators] == [name], f"slm/stages/{name}.py registers {decorators}"


def test_the_pipeline_names_no_stage():
    """The hub is gone: slm.pipeline imports the registry, no stage module, and no string there is a stage's name."""
    tree = ast.parse((PACKAGE / "pipeline.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "slm.stages" in imported and not any(m.startswith("slm.stages.") for m in imported if m)
    compared = {c.value for n in ast.walk(tree) if isinstance(n, ast.Compare)
                for c in [n.left, *n.comparators] if isinstance(c, ast.Constant)}
    assert compared & set(STAGES.names()) == set()


@pytest.fixture
def probe_stage():
    """A stage as a user's module would add it: one decorated function."""
    calls = []

    @stage("probe", trains=("specialize",), reads_domains=lambda cfg: [("specialize.domain", cfg.specialize.domain)],
           label=lambda cfg: f"probe of {cfg.specialize.domain}")
    def probe(cfg, run_dir: Path) -> dict:
        calls.append(run_dir)
        (run_dir / "probe.txt").write_text(cfg.specialize.domain)
        return {"output": str(run_dir / "probe.txt")}

    yield calls
    STAGES.remove("probe")


def test_a_stage_added_in_one_module_runs_and_is_checked(probe_stage, corpus_dir, tmp_path, monkeypatch):
    from slm import pipeline

    base = [f"corpus.dir={corpus_dir}", f"run.root={tmp_path}", "run.name=r", "stages=[probe]"]
    cfg = load_job(None, [*base, "specialize.domain=legal"])
    assert pipeline.job_name(cfg) == "slm r: probe of legal"
    results = pipeline.run_job(cfg)
    assert probe_stage == [tmp_path / "r"] and (tmp_path / "r" / "probe.txt").read_text() == "legal"
    assert json.loads((tmp_path / "r" / "results.json").read_text())["probe"] == results["probe"]
    # Its domains are checked before anything runs, naming its key ...
    with pytest.raises(ConfigError, match=r"config key 'specialize.domain': no domain 'nosuch'"):
        pipeline.run_job(load_job(None, [*base, "specialize.domain=nosuch"]))
    # ... and the loggers of the section it trains under.
    monkeypatch.setitem(pipeline.LOGGER_PACKAGES, "mlflow", ("no_such_module_here", "pip install it"))
    with pytest.raises(ConfigError, match=r"'specialize.train.loggers': mlflow is not installed"):
        pipeline.run_job(load_job(None, [*base, "specialize.domain=legal", "specialize.train.loggers=[mlflow]"]))
    assert len(probe_stage) == 1


def test_an_unknown_stage_names_the_key_and_the_stages_there_are():
    from slm.pipeline import check_stages

    with pytest.raises(ConfigError, match=r"config key 'stages': unknown stage\(s\) \['embedd'\]; known stages: "
                                          r"\['cluster', 'corpus', 'embed',"):
        check_stages(load_job(None, ["stages=[corpus, embedd]"]))
