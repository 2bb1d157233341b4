"""The README's main job, end to end: `slm run jobs/quickstart.yaml` on an embedded local Ray.

The job is run as shipped, except that it embeds a 0.5% sample instead of 2% to stay inside CI's
budget; every stage of the chain runs for real."""

import json

import pyarrow.parquet as pq
import pytest
import yaml

pytestmark = pytest.mark.ray


def test_quickstart_job(slm_cli, corpus_dir, corpus_manifest, tmp_path):
    embeddings = tmp_path / "embeddings"
    proc = slm_cli("run", "jobs/quickstart.yaml", f"corpus.dir={corpus_dir}", f"run.root={tmp_path}",
                   "embed.fraction=0.005", f"embed.output={embeddings}", "resample.tokens=50000", timeout=1200)
    out = proc.stdout
    assert "started an embedded local Ray" in out and "dashboard http://127.0.0.1:" in out
    assert "nothing to do" in out  # the corpus stage found the built corpus complete and current
    run_dir = tmp_path / "quickstart"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["corpus"]["dir"] == str(corpus_dir)
    results = json.loads((run_dir / "results.json").read_text())
    assert list(results) == ["corpus", "stats", "embed", "cluster", "histogram", "resample", "tokenizer", "pack"]
    # each stage's time and peak memory: the driver alone for the corpus stage (Ray starts with the first
    # stage that needs it), then the driver + the embedded Ray (> 0.5 GiB), well under the machine
    resources = json.loads((run_dir / "stage_resources.json").read_text())
    assert list(resources) == list(results)
    assert all(0 < r["peak_memory_gib"] < 20 and r["seconds"] >= 0 for r in resources.values()), resources
    assert all(resources[s]["peak_memory_gib"] > 0.5 for s in list(results)[1:]), resources
    assert resources["embed"]["peak_memory_gib"] > resources["corpus"]["peak_memory_gib"] + 0.5  # + the actors

    # stats: every document of the corpus, per source
    rows = json.loads((run_dir / "stats" / "stats.json").read_text())
    by_domain = {}
    for r in rows:
        by_domain[r["domain"]] = by_domain.get(r["domain"], 0) + r["documents"]
        assert r["tokens"] > 0 and 1.5 < r["chars_per_token"] < 8
    assert by_domain["generic"] == corpus_manifest["generic"]["documents"]
    for domain, splits in corpus_manifest["domains"].items():
        assert by_domain[domain] == splits["train"]["documents"] + splits["valid"]["documents"]
    for r in rows:  # the printed table carries every row
        assert f"{r['documents']:10d}" in out

    # embed → cluster → histogram: every domain has a histogram over the 16 × 4 leaves
    assert results["embed"]["windows"] == sum(pq.read_metadata(p).num_rows for p in embeddings.rglob("*.parquet")
                                              if ".work" not in p.parts)
    histograms = json.loads((run_dir / "histograms" / "histograms.json").read_text())
    assert histograms["leaves"] == 64 and set(histograms["domains"]) == set(corpus_manifest["domains"])
    # resample: CRISP lands far closer to the domain's histogram than the uniform control
    resample = results["resample"]
    assert resample["crisp"]["kl_resampled_to_domain"] < resample["uniform"]["kl_resampled_to_domain"]
    assert set(resample) == {"crisp", "uniform", "dsir"}
    # tokenizer + pack: uint16 sequences of 257 tokens for every set
    assert results["tokenizer"]["vocab_size"] == 8192
    assert set(results["pack"]) == {"generic", "domain/legal", "resampled/legal/crisp",
                                    "resampled/legal/uniform", "resampled/legal/dsir",
                                    *(f"valid/{d}" for d in corpus_manifest["domains"])}
    assert all(v["sequences"] > 0 for v in results["pack"].values())
