"""Issue 19's probes, re-measured: bad input to `slm corpus import` and config values that must fail before
anything runs. Each probe is run as a user would (the `slm` command, a fresh corpus folder each) and
judged by what came back:

- an input probe is *handled* when the command either imports what it should (the documents counted,
  nothing silently dropped: what was left out is counted or listed) or fails with a one-line error that
  names the file (and line, where there is one) and leaves the corpus as it was; a traceback is not
  handled;
- a config probe is *refused* when `slm config` (or, for what only a run can check, `slm run` before any
  stage starts) exits non-zero with an error naming the config key.

    .venv/bin/python benchmarks/probes.py > benchmarks/results/probes.json

Needs the bundled corpus (`slm corpus build`) for real text; ~2 s a config probe, ~20 s an input probe
(each import starts its own local Ray, as the command does).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "platform"))

from slm.corpus.config import CorpusConfig  # noqa: E402


def slm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([sys.executable, "-m", "slm.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def real_texts(n: int) -> list[str]:
    corpus = Path(CorpusConfig().dir).expanduser()
    files = sorted((corpus / "domains" / "legal" / "train").glob("*.parquet"))
    texts = pq.read_table(files[0], columns=["text"]).column("text").to_pylist()
    return [t[:1500] for t in texts[:n]]


def jsonl(texts: list[str]) -> str:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts)


def input_probes(root: Path) -> list[tuple[str, list[str], dict]]:
    """(name, `slm corpus import` arguments after PATH's role, expectation) for each bad input.
    Expectations: ``{"error": [words]}`` (must fail naming them) or ``{"documents": n, **counts}``."""
    texts = real_texts(40)
    good = jsonl(texts[:6])
    probes = []

    def write(name: str, data: bytes | str) -> str:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return str(path)

    def add(name, path, expect, *extra):
        probes.append((name, [path, *extra], expect))

    add("malformed JSON line", write("malformed.jsonl", good + '{"text": "cut off\n'),
        {"documents": 6, "quarantined": 1})
    add("malformed JSON line, --on-error fail", write("malformed2.jsonl", good + '{"text": "cut off\n'),
        {"error": ["malformed2.jsonl:7", "not JSON"]}, "--on-error", "fail")
    add("non-UTF-8 bytes", write("latin1.jsonl", good.encode() + '{"text": "caf\xe9 cr\xe8me"}\n'.encode("latin-1")),
        {"documents": 7, "decode_errors": 1})
    add("UTF-8 BOM + CRLF", write("bom.jsonl", b"\xef\xbb\xbf" + good.replace("\n", "\r\n").encode()),
        {"documents": 6, "quarantined": 0})
    add("lone surrogate", write("surrogate.jsonl", good + '{"text": "half a pair \\ud800 here"}\n'),
        {"documents": 7, "decode_errors": 1})
    add("a number where an object belongs", write("number.jsonl", good + "42\n"), {"documents": 6, "quarantined": 1})
    add("text field not a string", write("typed.jsonl", good + json.dumps({"text": 5}) + "\n"),
        {"documents": 6, "quarantined": 1})
    add("no text field anywhere", write("content.jsonl", json.dumps({"content": texts[0]}) + "\n"),
        {"error": ["content.jsonl:1", "--text-column"]})
    pq.write_table(pa.table({"text": texts[:6]}), root / "whole.parquet")
    add("truncated Parquet", write("cut.parquet", (root / "whole.parquet").read_bytes()[:-30]),
        {"error": ["cut.parquet", "not a readable Parquet file"]})
    add("empty file", write("empty.jsonl", ""), {"error": ["empty.jsonl", "nothing to import"]})
    add("blank lines only", write("blank.jsonl", "\n\n  \n"), {"error": ["blank.jsonl", "nothing to import"]})
    add("JSON array, not JSON Lines", write("array.json", json.dumps([{"text": t} for t in texts[:3]])),
        {"error": ["array.json", "JSON array", "jq"]})
    add("a path that does not exist", str(root / "missing.jsonl"), {"error": ["missing.jsonl", "no such file"]})
    write("globbed/a.jsonl", jsonl(texts[:3]))
    write("globbed/b.jsonl", jsonl(texts[3:6]))
    add("a documented glob", str(root / "globbed" / "*.jsonl"), {"documents": 6})
    add("a glob that matches nothing", str(root / "globbed" / "*.parquet"), {"error": ["matches no file"]})
    write("mixed/a.jsonl", jsonl(texts[:4]))
    pq.write_table(pa.table({"text": texts[4:8]}), root / "mixed" / "b.parquet")
    write("mixed/c.txt", texts[8])
    write("mixed/notes.docx", b"PK\x03\x04")
    add("a folder of mixed formats", str(root / "mixed"), {"documents": 9, "skipped": 1})
    write("gz.jsonl.gz", gzip.compress(jsonl(texts[:5]).encode()))
    add("gzip JSON Lines", str(root / "gz.jsonl.gz"), {"documents": 5})
    add("duplicates", write("dupes.jsonl", jsonl([texts[0]] * 10 + texts[1:5])), {"documents": 5, "duplicates": 9})
    huge = "\n\n".join(texts) * 3
    add("one huge document", write("huge.jsonl", json.dumps({"text": huge}) + "\n"),
        {"documents_at_least": len(huge) // 8000, "max_chars": 8000})
    add("empty documents", write("emptydocs.jsonl", good + jsonl(["", "   ", "\n"])),
        {"documents": 6, "empty": 3})
    add("null text", write("null.jsonl", good + json.dumps({"text": None}) + "\n"), {"documents": 6, "empty": 1})
    return probes


NAME_PROBES = [  # (name, domain flag value, words the refusal must contain)
    ("--domain generic", "generic", ["--generic"]),
    ('--domain ""', "", ["not a valid name"]),
    ("a 300-character domain name", "d" * 300, ["not a valid name"]),
    ("a domain name with a slash", "a/b", ["not a valid name"]),
    ("a domain name with ..", "..", ["not a valid name"]),
]

CONFIG_PROBES = [  # overrides of jobs/quickstart.yaml that must be refused, naming the key
    ("budget.flops=.inf", "pretrain.train.budget.flops=.inf", "budget.flops"),
    ("budget.flops=.nan", "pretrain.train.budget.flops=.nan", "budget.flops"),
    ("optim.lr=-1", "pretrain.train.optim.lr=-1", "optim.lr"),
    ("checkpoint_every=-1", "pretrain.train.checkpoint_every=-1", "checkpoint_every"),
    ("max_failures=-5", "pretrain.train.max_failures=-5", "max_failures"),
    ("ray.num_cpus=0", "ray.num_cpus=0", "ray.num_cpus"),
    ("dashboard_port=99999", "ray.dashboard_port=99999", "ray.dashboard_port"),
    ("depth=100000", "pretrain.model.depth=100000", "depth"),
    ("shard_docs=0", "corpus.shard_docs=0", "corpus.shard_docs"),
    ("run.name=../../x", "run.name=../../x", "run.name"),
    ("an unknown key", "pretrain.train.learning_rate=1e-3", "learning_rate"),
    ("a wrong type", "pretrain.train.batch_size=many", "batch_size"),
    ("embed.fraction=0", "embed.fraction=0", "embed.fraction"),
    ("keep_checkpoints=0", "pretrain.train.keep_checkpoints=0", "keep_checkpoints"),
    ("resample.tokens=-5", "resample.tokens=-5", "resample.tokens"),
]

RUN_PROBES = [  # what only a run can check, refused before any stage starts (num_workers beyond the
    # embedded Ray's CPUs is refused when the stage starts Ray Train: tests/test_config.py)
    ("a stage that does not exist", "stages=[embed, polish]", "stages"),
    ("an unknown domain to evaluate on", "corpus.domains=[legal, poetry]", "poetry"),
    ("an unknown domain to resample for", "resample.domain=poetry", "poetry"),
    ("an unknown domain to embed", "embed.domains=[poetry]", "poetry"),
]

YAML_PROBES = [  # job files
    ("a duplicated YAML key", "run:\n  name: a\n  name: b\n", "name"),
    ("a YAML alias bomb", "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                          "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                          "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                          "g: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n", "alias"),
]


def judge_input(expect: dict, proc: subprocess.CompletedProcess, corpus: Path) -> tuple[bool, str]:
    text = proc.stdout + proc.stderr
    if "Traceback" in text:
        return False, "traceback: " + text.strip().splitlines()[-1][:200]
    if "error" in expect:
        ok = proc.returncode != 0 and all(w in text for w in expect["error"]) and not (corpus / "generic").exists()
        return ok, text.strip().splitlines()[-1][:200] if text.strip() else ""
    if proc.returncode != 0:
        return False, text.strip().splitlines()[-1][:200]
    record = json.loads(proc.stdout[proc.stdout.index("{"):])
    documents = record["splits"]["all"]["documents"]
    checks = {"documents": documents == expect.get("documents", documents),
              "documents_at_least": documents >= expect.get("documents_at_least", 0),
              "skipped": len(record["skipped"]) == expect.get("skipped", len(record["skipped"]))}
    if "max_chars" in expect:
        texts = pq.read_table(sorted((corpus / "generic").glob("*.parquet")), columns=["text"]).column("text")
        checks["max_chars"] = max(len(t) for t in texts.to_pylist()) <= expect["max_chars"]
    for key in ("quarantined", "decode_errors", "duplicates", "empty"):
        if key in expect:
            checks[key] = record[key] == expect[key]
    seen = {k: record.get(k) for k in ("records", "quarantined", "decode_errors", "duplicates", "empty")}
    return all(checks.values()), f"{documents} documents; {seen}; " + ", ".join(k for k, v in checks.items() if not v)


def main() -> None:
    started = time.perf_counter()
    results = {"inputs": [], "names": [], "config": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, args, expect in input_probes(root / "in"):
            corpus = root / "corpora" / str(len(results["inputs"]))
            proc = slm("corpus", "import", args[0], "--generic", *args[1:], f"corpus.dir={corpus}")
            handled, said = judge_input(expect, proc, corpus)
            results["inputs"].append({"probe": name, "handled": handled, "said": said})
            print(f"[probe] input {name}: {'handled' if handled else 'NOT handled'} ({said})", file=sys.stderr, flush=True)
        for name, value, words in NAME_PROBES:
            began = time.perf_counter()
            proc = slm("corpus", "import", str(root / "in" / "bom.jsonl"), "--domain", value, f"corpus.dir={root / 'names'}")
            text = proc.stdout + proc.stderr
            refused = (proc.returncode != 0 and all(w in text for w in words) and "Traceback" not in text
                       and "[ray]" not in text)  # before Ray starts
            results["names"].append({"probe": name, "refused_before_ray": refused, "seconds": round(time.perf_counter() - began, 1),
                                     "said": text.strip().splitlines()[-1][:200] if text.strip() else ""})
        for kind, probes in (("config", CONFIG_PROBES), ("run", RUN_PROBES)):
            for name, override, key in probes:
                # A run probe keeps the quickstart's stages (an override of `stages` replaces them): a
                # refusal must come before the first stage starts.
                args = (("config", "jobs/quickstart.yaml", override) if kind == "config" else
                        ("run", "jobs/quickstart.yaml", override, f"run.root={root / 'runs'}"))
                proc = slm(*args)
                text = proc.stdout + proc.stderr
                refused = (proc.returncode != 0 and key in text and "Traceback" not in text
                           and "[run] stage" not in text)
                results["config"].append({"probe": name, "refused": refused,
                                          "said": text.strip().splitlines()[-1][:200] if text.strip() else ""})
        for name, body, word in YAML_PROBES:
            job = root / "job.yaml"
            job.write_text(body)
            proc = slm("config", str(job))
            text = proc.stdout + proc.stderr
            refused = proc.returncode != 0 and word in text and "Traceback" not in text
            results["config"].append({"probe": name, "refused": refused,
                                      "said": text.strip().splitlines()[-1][:200] if text.strip() else ""})
    results["counts"] = {
        "bad inputs handled / tried": f"{sum(r['handled'] for r in results['inputs'])} / {len(results['inputs'])}",
        "bad names refused before Ray / tried": f"{sum(r['refused_before_ray'] for r in results['names'])} / {len(results['names'])}",
        "bad configs refused / tried": f"{sum(r['refused'] for r in results['config'])} / {len(results['config'])}",
    }
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
