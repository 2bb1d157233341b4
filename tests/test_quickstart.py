"""The README's main job, end to end: `slm run jobs/quickstart.yaml` on an embedded local Ray.

The default suite runs the job as shipped through the CLI on the mini corpus, every stage after the
corpus build and the statistics (both tested on their own: tests/test_corpus_build.py,
tests/test_import_and_stats.py), reading the embedding the data tests made (embedding is most of the
job's time on 2 cores). The slow test runs all of it on the whole bundled corpus, embedding a 0.5%
sample of generic instead of 2% (and legal's train split whole, as always): every stage of the chain
runs for real."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import noise

pytestmark = pytest.mark.ray

STAGES = ["embed", "cluster", "histogram", "resample", "tokenizer", "pack"]  # after corpus and stats


def check_outputs(run_dir: Path, domains: list[str], embeddings: Path, embedded_domains: list[str]) -> dict:
    """What every quickstart run leaves: each stage's result and resources, histograms over the 16 × 4
    leaves for the embedded domains, CRISP closer to the domain than the uniform control, packed sets
    (a valid set for each of ``domains``)."""
    results = json.loads((run_dir / "results.json").read_text())
    # each stage's time and peak memory: the driver + the embedded Ray (> 0.5 GiB), well under the machine
    resources = json.loads((run_dir / "stage_resources.json").read_text())
    assert list(resources) == list(results)
    assert all(0 < r["peak_memory_gib"] < 20 and r["seconds"] >= 0 for r in resources.values()), resources
    assert all(resources[s]["peak_memory_gib"] > 0.5 for s in STAGES), resources

    # embed → cluster → histogram: every domain has a histogram over the 16 × 4 leaves
    assert results["embed"]["windows"] == sum(pq.read_metadata(p).num_rows for p in embeddings.rglob("*.parquet")
                                              if ".work" not in p.parts)
    histograms = json.loads((run_dir / "histograms" / "histograms.json").read_text())
    assert histograms["leaves"] == 64 and set(histograms["domains"]) == set(embedded_domains)
    # resample: CRISP lands far closer to the domain's histogram than the uniform control
    resample = results["resample"]
    assert resample["legal/crisp"]["kl_resampled_to_domain"] < resample["legal/uniform"]["kl_resampled_to_domain"]
    assert set(resample) == {"legal/crisp", "legal/uniform", "legal/dsir"}
    # tokenizer + pack: uint16 sequences of 257 tokens for every set
    assert results["tokenizer"]["vocab_size"] == 8192
    assert set(results["pack"]) == {"generic", "domain/legal", "resampled/legal/crisp",
                                    "resampled/legal/uniform", "resampled/legal/dsir",
                                    *(f"valid/{d}" for d in domains)}
    assert all(v["sequences"] > 0 for v in results["pack"].values())
    return results


def test_quickstart_job_on_the_mini_corpus(slm_cli, mini_corpus_dir, embedded, tmp_path):
    embeddings, manifest, _ = embedded
    domains = ["legal", "medical", "code"]
    proc = slm_cli("run", "jobs/quickstart.yaml", f"corpus.dir={mini_corpus_dir}", f"corpus.domains=[{', '.join(domains)}]",
                   f"stages=[{', '.join(STAGES)}]", f"run.root={tmp_path}", "embed.fraction=1.0",
                   f"embed.output={embeddings}", "resample.tokens=20000", timeout=900)
    out = proc.stdout
    assert "started an embedded local Ray" in out and "dashboard http://127.0.0.1:" in out
    assert noise(proc.stdout + proc.stderr) == {}  # issue 31: no alarming library line without -v
    results = check_outputs(tmp_path / "quickstart", domains, embeddings, domains)  # the fixture embedded all three
    assert list(results) == STAGES
    # the data tests' embedding is this job's too (the same vectors' config): found complete, nothing redone
    assert results["embed"]["windows"] == manifest["windows"]
    assert "already complete and current; 0 to do" in out


# ~7 min with AMX; ~35 min on a 2-core AVX2 machine (float32): legal's whole train split is 13,750 windows.
@pytest.mark.slow  # statistics of the whole bundled corpus; 0.5% of generic and all of legal embedded
def test_quickstart_job(slm_cli, corpus_dir, corpus_manifest, tmp_path):
    embeddings = tmp_path / "embeddings"
    proc = slm_cli("run", "jobs/quickstart.yaml", f"corpus.dir={corpus_dir}", f"run.root={tmp_path}",
                   "embed.fraction=0.005", f"embed.output={embeddings}", "resample.tokens=50000", timeout=3600)
    out = proc.stdout
    assert "started an embedded local Ray" in out and "dashboard http://127.0.0.1:" in out
    assert "nothing to do" in out  # the corpus stage found the built corpus complete and current
    run_dir = tmp_path / "quickstart"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["corpus"]["dir"] == str(corpus_dir)
    results = check_outputs(run_dir, list(corpus_manifest["domains"]), embeddings, ["legal"])
    assert list(results) == ["corpus", "stats", *STAGES]
    # the driver alone for the corpus stage (Ray starts with the first stage that needs it), then + the actors
    resources = json.loads((run_dir / "stage_resources.json").read_text())
    assert resources["stats"]["peak_memory_gib"] > 0.5
    assert resources["embed"]["peak_memory_gib"] > resources["corpus"]["peak_memory_gib"] + 0.5

    # stats: every document of the corpus, per source
    rows = json.loads((run_dir / "stats" / "stats.json").read_text())
    by_domain = {}
    for r in rows:
        by_domain[r["domain"]] = by_domain.get(r["domain"], 0) + r["documents"]
        assert r["tokens"] > 0 and 1.5 < r["chars_per_token"] < 8
    assert by_domain == {"generic": corpus_manifest["generic"]["documents"],
                         **{d: s["train"]["documents"] + s["valid"]["documents"]
                            for d, s in corpus_manifest["domains"].items()}}
    for r in rows:  # the printed table carries every row
        assert f"{r['documents']:10d}" in out
