"""The README's main job, end to end: `slm run jobs/quickstart.yaml` on an embedded local Ray."""

import json

import pytest
import yaml

pytestmark = pytest.mark.ray


def test_quickstart_job(slm_cli, corpus_dir, corpus_manifest, tmp_path):
    proc = slm_cli("run", "jobs/quickstart.yaml", f"corpus.dir={corpus_dir}", f"run.root={tmp_path}")
    out = proc.stdout
    assert "started an embedded local Ray" in out and "dashboard http://127.0.0.1:" in out
    assert "nothing to do" in out  # the corpus stage found the built corpus complete and current
    run_dir = tmp_path / "quickstart"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["corpus"]["dir"] == str(corpus_dir)
    rows = json.loads((run_dir / "stats" / "stats.json").read_text())
    by_domain = {}
    for r in rows:
        by_domain.setdefault(r["domain"], 0)
        by_domain[r["domain"]] += r["documents"]
        assert r["tokens"] > 0 and 1.5 < r["chars_per_token"] < 8
    assert by_domain["generic"] == corpus_manifest["generic"]["documents"]
    for domain, splits in corpus_manifest["domains"].items():
        assert by_domain[domain] == splits["train"]["documents"] + splits["valid"]["documents"]
    sources = {r["source"] for r in rows if r["domain"] == "generic"}
    assert sources == set(corpus_manifest["generic"]["by_source"])
    for r in rows:  # the printed table carries every row
        assert f"{r['documents']:10d}" in out
