"""Issue 19's, 32's and 44's probes, re-measured: bad input to `slm corpus import`, config values that must fail
before anything runs, corrupt artifacts (zeroed, truncated, swapped: each must stop what reads it in one
line naming the file), corrupt artifacts met by the commands a user runs (`slm run`, `slm data resample`,
`generate`, `export`, `train specialize --source`, `train pretrain`, `corpus import`: remade saying so, or
refused in one line, and no manifest recorded over them), the stats stage's rerun, and the sockets a local
DDP run listens on (none beyond the loopback). Each probe is run as a user would (the `slm` command, a fresh corpus folder each) and
judged by what came back:

- an input probe is *handled* when the command either imports what it should (the documents counted,
  nothing silently dropped: what was left out is counted or listed) or fails with a one-line error that
  names the file (and line, where there is one) and leaves the corpus as it was; a traceback is not
  handled;
- a config probe is *refused* when `slm config` (or, for what only a run can check, `slm run` before any
  stage starts) exits non-zero with an error naming the config key.

    .venv/bin/python benchmarks/probes.py > benchmarks/results/probes.json
    .venv/bin/python benchmarks/probes.py --only config integrity stats_rerun   # some sections

Needs the bundled corpus (`slm corpus build`) for real text; ~2 s a config probe, ~20 s an input probe
(each import starts its own local Ray, as the command does); the artifact probes make a tiny run first
(~5 minutes on 2 cores) and then read 15 corrupted copies of it.
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
        {"error": ["malformed2.jsonl:7", "not JSON"], "needs_records": True}, "--on-error", "fail")
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
        {"error": ["content.jsonl:1", "--text-column"], "needs_records": True})
    pq.write_table(pa.table({"text": texts[:6]}), root / "whole.parquet")
    add("truncated Parquet", write("cut.parquet", (root / "whole.parquet").read_bytes()[:-30]),
        {"error": ["cut.parquet", "not a readable Parquet file"]})
    pq.write_table(pa.table({"content": texts[:3], "id2": [1, 2, 3]}), root / "notext.parquet")
    add("Parquet without the text column", str(root / "notext.parquet"),
        {"error": ["notext.parquet", "no column 'text'", "--text-column"]})
    pq.write_table(pa.table({"text": [1, 2, 3]}), root / "numbers.parquet")
    add("Parquet whose text is numbers", str(root / "numbers.parquet"), {"error": ["numbers.parquet", "not text"]})
    add("a CSV file", write("table.csv", "text\n" + "\n".join(t[:80].replace(",", " ").replace("\n", " ")
                                                            for t in texts[:3]) + "\n"),
        {"error": ["table.csv", "not a supported file"]})
    add("a generic corpus that exists, without --replace", write("again.jsonl", good),
        {"error": ["already exists", "--replace"], "existing": True})
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
    # issue 44: names and output folders that became paths out of the run, values that planned or crashed
    ("sweep.name=../../../../x", "sweep.name=../../../../x", "sweep.name"),
    ("pretrain.name=../../../../y", "pretrain.name=../../../../y", "pretrain.name"),
    ("specialize.name=../../../x", "specialize.name=../../../x", "specialize.name"),
    ("sweep.output=../../..", "sweep.output=../../..", "sweep.output"),
    ("an empty sweep.name", "sweep.name=''", "sweep.name"),
    ("cluster.output=../c", "cluster.output=../c", "cluster.output"),
    ("sweep.sizes=[d999]", "sweep.sizes=[d999]", "sweep.sizes"),
    ("sweep.sizes=[d0]", "sweep.sizes=[d0]", "sweep.sizes"),
    ("sweep.max_concurrent_trials=-1", "sweep.max_concurrent_trials=-1", "sweep.max_concurrent_trials"),
    ("sweep.assumed_mfu=0", "sweep.assumed_mfu=0", "sweep.assumed_mfu"),
    ("sweep.assumed_mfu=-1", "sweep.assumed_mfu=-1", "sweep.assumed_mfu"),
    ("eval_tokens=-1 (its message says what 0 means)", "pretrain.train.eval_tokens=-1", "the whole valid split"),
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


def files_of(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


def judge_input(expect: dict, proc: subprocess.CompletedProcess, corpus: Path,
                corpus_before: dict[str, bytes]) -> tuple[bool, str]:
    text = proc.stdout + proc.stderr
    if "Traceback" in text:
        return False, "traceback: " + text.strip().splitlines()[-1][:200]
    if "error" in expect:
        ok = (proc.returncode != 0 and all(w in text for w in expect["error"])
              and files_of(corpus) == corpus_before)  # the corpus as it was
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


# Issue 32: artifacts the stages wrote, corrupted three ways; each must stop what reads it in one line
# naming the file. (artifact, files to corrupt under the run, the command that reads it)
ARTIFACT_PROBES = [
    ("packed arrays", "packed/generic/arrays/tokens.npy", "train"),
    ("packed Parquet", "packed/generic/data/*.parquet", "train-remade-arrays"),
    ("embeddings", "embeddings/generic/*.parquet", "cluster"),
    ("cluster assignments", "clusters/assignments/*.parquet", "histogram"),
    ("corpus shards", "corpus/generic/*.parquet", "stats"),
]
CORRUPTIONS = ("zeroed", "truncated", "swapped")


def tiny_run(root: Path) -> list[str]:
    """A whole small run made by the real stages (every manifest recording its files): a corpus of 60
    generic and 40 legal documents, embedded, clustered, resampled, tokenized and packed. Returns the
    overrides that point a command at it."""
    texts = real_texts(40)
    generic = pq.read_table(sorted((Path(CorpusConfig().dir).expanduser() / "generic").glob("*.parquet"))[0],
                            columns=["text"]).column("text").to_pylist()[:60]
    pq.write_table(pa.table({"text": [t[:1500] for t in generic]}), root / "generic.parquet")
    pq.write_table(pa.table({"text": texts}), root / "legal.parquet")
    corpus = root / "run" / "corpus"
    for args in (["--generic"], ["--domain", "legal"]):
        proc = slm("corpus", "import", str(root / ("generic.parquet" if args[0] == "--generic" else "legal.parquet")),
                   *args, f"corpus.dir={corpus}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    overrides = [f"corpus.dir={corpus}", "corpus.domains=[legal]", f"run.root={root / 'run'}", "run.name=tiny",
                 f"embed.output={root / 'run' / 'embeddings'}", "embed.fraction=1.0", "embed.compile=never",
                 "cluster.k=2", "cluster.fine_k=0", "cluster.sample_size=500", "resample.tokens=3000",
                 "resample.methods=[crisp]", "tokenizer.vocab_size=512", "pack.seq_len=64", "ray.include_dashboard=false"]
    proc = slm("run", "jobs/quickstart.yaml", "stages=[embed, cluster, histogram, resample, tokenizer, pack]",
               *overrides, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = slm(*artifact_command("train", overrides), timeout=900)  # the packed arrays, made as a run starts
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return overrides


def artifact_command(kind: str, overrides: list[str]) -> list[str]:
    train = ["train", "pretrain", "--config", "jobs/pretrain.yaml", *overrides, "pretrain.model.depth=1",
             "pretrain.train.num_workers=0", "pretrain.train.budget.steps=2", "pretrain.train.eval_tokens=512",
             "pretrain.train.batch_size=2", "pretrain.train.checkpoint_every=0"]
    return {"train": train, "train-remade-arrays": train,
            "cluster": ["run", "jobs/quickstart.yaml", "stages=[cluster]", *overrides],
            "histogram": ["run", "jobs/quickstart.yaml", "stages=[histogram]", *overrides],
            "stats": ["data", "stats", *overrides]}[kind]


def artifact_probes(root: Path, overrides: list[str]) -> list[dict]:
    """Each artifact of the tiny run under ``root/run`` corrupted in a copy of the run, then read."""
    import shutil

    base = root
    results = []
    for name, pattern, kind in ARTIFACT_PROBES:
        for how in CORRUPTIONS:
            trial = root / f"{name.replace(' ', '-')}-{how}"
            shutil.copytree(base / "run", trial)
            moved = [o.replace(str(base / "run"), str(trial)) for o in overrides]
            run_dir = trial / "tiny" if not pattern.startswith(("embeddings", "corpus")) else trial
            files = sorted(run_dir.glob(pattern))
            target = files[0]
            data = target.read_bytes()
            if how == "zeroed":
                target.write_bytes(bytes(len(data)))
            elif how == "truncated":
                target.write_bytes(data[: len(data) // 2])
            else:  # another file of its kind in its place
                other = next(f for f in sorted(trial.rglob("*" + target.suffix)) if f != target and f.stat().st_size > 64)
                target.write_bytes(other.read_bytes())
            if kind == "train-remade-arrays":
                shutil.rmtree(run_dir / "packed" / "generic" / "arrays")
            proc = slm(*artifact_command(kind, moved), timeout=900)
            err = [line for line in proc.stderr.strip().splitlines() if line.strip()]
            detected = (proc.returncode != 0 and target.name in (err[-1] if err else "")
                        and "Traceback" not in proc.stderr)
            results.append({"artifact": name, "corruption": how, "file": str(target.relative_to(trial)),
                            "detected_one_line": detected, "said": (err[-1] if err else "")[:240]})
            print(f"[probe] {name} {how}: {'detected' if detected else 'NOT detected'} ({results[-1]['said']})",
                  file=sys.stderr, flush=True)
            shutil.rmtree(trial)
    return results


# Issue 44: what a stage finds corrupt is remade (saying so) and never recorded as written; every command
# that reads an artifact (models included) checks it. (name, file under the trial to corrupt, how, the
# command, what must happen: "refused" in one line naming the file, or "remade" with a line saying so).
MODEL = "tiny/checkpoints/generic-d1/model.safetensors"
INTEGRITY_PROBES = [
    ("embeddings shard zeroed, then `slm run` embed + cluster", "embeddings/generic/*.parquet", "zeroed",
     "run-embed-cluster", "remade"),
    ("embeddings shard truncated, then `slm run` embed + cluster", "embeddings/generic/*.parquet", "truncated",
     "run-embed-cluster", "remade"),
    ("cluster assignments zeroed, then `slm data resample`", "tiny/clusters/assignments/*.parquet", "zeroed",
     "resample", "refused"),
    ("model zeroed, then `slm generate`", MODEL, "zeroed", "generate", "refused"),
    ("model truncated, then `slm generate`", MODEL, "truncated", "generate", "refused"),
    ("model zeroed, then `slm train specialize --source`", MODEL, "zeroed", "specialize", "refused"),
    ("model truncated, then `slm export`", MODEL, "truncated", "export", "refused"),
    ("packed Parquet zeroed beside intact arrays, then `slm train pretrain`", "tiny/packed/generic/data/*.parquet",
     "zeroed", "train", "refused"),
    ("another domain's corpus shard zeroed, then `slm corpus import --domain`", "corpus/generic/*.parquet",
     "zeroed", "import", "refused"),
]


def integrity_command(kind: str, trial: Path, overrides: list[str]) -> list[str]:
    model = str(trial / MODEL)
    return {
        "run-embed-cluster": ["run", "jobs/quickstart.yaml", "stages=[embed, cluster]", *overrides],
        "resample": ["data", "resample", "--domain", "legal", "--tokens", "2000", "--method", "crisp", *overrides,
                     "resample.output=resampled2"],
        "generate": ["generate", model, "--prompt", "The court", "--max-new-tokens", "4"],
        "export": ["export", model, "--format", "hf", str(trial / "exported")],
        "specialize": ["train", "specialize", "--config", "jobs/pretrain.yaml", *overrides, "--source", "generic-d1",
                       "--domain", "legal", "specialize.train.budget.steps=2", "specialize.train.num_workers=0",
                       "specialize.train.eval_tokens=512", "specialize.train.batch_size=2",
                       "specialize.domain_tokens=2000"],
        "train": artifact_command("train", overrides),
        "import": ["corpus", "import", str(trial.parent / "legal.parquet"), "--domain", "legal2",
                   f"corpus.dir={trial / 'corpus'}"],
    }[kind]


def integrity_probes(root: Path, overrides: list[str]) -> list[dict]:
    """Each case of INTEGRITY_PROBES in a copy of the tiny run under ``root/run``."""
    import shutil

    from slm.artifacts import changed_files, file_sha256, read_manifest

    results = []
    for name, pattern, how, kind, expect in INTEGRITY_PROBES:
        trial = root / f"integrity-{len(results)}"
        shutil.copytree(root / "run", trial)
        moved = [o.replace(str(root / "run"), str(trial)) for o in overrides]
        target = sorted(trial.glob(pattern))[0]
        folder = next(f for f in target.parents if (f / "manifest.json").exists())
        manifest_before = (folder / "manifest.json").read_bytes()
        data = target.read_bytes()
        target.write_bytes(bytes(len(data)) if how == "zeroed" else data[: len(data) // 2])
        found = file_sha256(target)
        proc = slm(*integrity_command(kind, trial, moved), timeout=900)
        text = proc.stdout + proc.stderr
        err = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        if expect == "refused":
            ok = (proc.returncode != 0 and target.name in (err[-1] if err else "") and "Traceback" not in text
                  and (folder / "manifest.json").read_bytes() == manifest_before)
            said = err[-1] if err else ""
        else:  # remade: said so, the run succeeded with no traceback, and the file is what its manifest records
            recorded = (read_manifest(folder) or {}).get("files", {}).get(str(target.relative_to(folder)), {})
            said = next((line for line in text.splitlines() if target.name in line), "")
            ok = (proc.returncode == 0 and "Traceback" not in text and "again" in said and not changed_files(folder)
                  and recorded.get("sha256") not in (None, found))
        results.append({"probe": name, "file": str(target.relative_to(trial)), "expected": expect, "passed": ok,
                        "rc": proc.returncode, "traceback": "Traceback" in text, "said": said[:240]})
        print(f"[probe] {name}: {'passed' if ok else 'FAILED'} ({said[:200]})", file=sys.stderr, flush=True)
        shutil.rmtree(trial)
    return results


def stats_rerun_probe(overrides: list[str]) -> dict:
    """The stats stage reran in full on every `slm run` (181-240 s on the bundled corpus): the second run
    of it must say it is complete and current."""
    runs = []
    for _ in range(2):
        began = time.perf_counter()
        proc = slm("run", "jobs/quickstart.yaml", "stages=[stats]", *overrides)
        runs.append({"rc": proc.returncode, "seconds": round(time.perf_counter() - began, 1),
                     "skipped": "[stats] complete and current" in proc.stdout,
                     "traceback": "Traceback" in proc.stdout + proc.stderr})
    return {"first": runs[0], "second": runs[1], "passed": runs[1]["rc"] == 0 and runs[1]["skipped"]}


SOCKETS = """
import json, sys, threading, time, psutil
from slm.cli import main
found, stop = set(), threading.Event()
def watch():  # every socket a process of this driver's tree listens on, while it trains
    me = psutil.Process()
    while not stop.is_set():
        procs = [me, *me.children(recursive=True)] + [p for p in psutil.process_iter(["cmdline"])
                  if "RayTrainWorker" in " ".join(p.info["cmdline"] or []) or "ray::" in " ".join(p.info["cmdline"] or [])]
        for p in procs:
            try:
                found.update((c.laddr.ip, c.laddr.port) for c in p.net_connections(kind="inet") if c.status == "LISTEN")
            except psutil.Error:
                pass
        time.sleep(0.5)
threading.Thread(target=watch, daemon=True).start()
code = main(sys.argv[1:])
stop.set()
print(json.dumps({"rc": code, "listening": sorted(found)}))
"""


def socket_probe(overrides: list[str]) -> dict:
    """`slm train pretrain` with DDP on 2 workers, on the embedded local Ray: every listening socket of its
    processes (the driver's tree and Ray's workers), sampled while it trains."""
    args = ["train", "pretrain", "--config", "jobs/pretrain.yaml", *overrides, "pretrain.model.depth=1",
            "pretrain.train.num_workers=2", "pretrain.train.budget.steps=20", "pretrain.train.eval_tokens=512",
            "pretrain.train.batch_size=2", "pretrain.train.checkpoint_every=0", "pretrain.method=mixture"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": str(REPO / "platform")}
    proc = subprocess.run([sys.executable, "-c", SOCKETS, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=1200, env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    off = [s for s in out["listening"] if s[0] not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
    return {"rc": out["rc"], "listening": len(out["listening"]), "beyond_loopback": off,
            "traceback": "Traceback" in proc.stderr + "\n".join(proc.stdout.splitlines()[:-1])}


SECTIONS = ("inputs", "names", "config", "artifacts", "integrity", "stats_rerun", "sockets")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                    help="run these sections only (the artifact, integrity, stats and socket probes share one tiny run)")
    only = set(ap.parse_args().only)
    started = time.perf_counter()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "inputs" in only:
            results["inputs"] = run_input_probes(root)
        if "names" in only:
            results["names"] = run_name_probes(root)
        if "config" in only:
            results["config"] = run_config_probes(root)
        if only & {"artifacts", "integrity", "stats_rerun", "sockets"}:
            base = root / "base"
            base.mkdir()
            overrides = tiny_run(base)
            if "artifacts" in only:
                results["artifacts"] = artifact_probes(base, overrides)
            if "integrity" in only:
                results["integrity"] = integrity_probes(base, overrides)
            if "stats_rerun" in only:
                results["stats_rerun"] = stats_rerun_probe(overrides)
            if "sockets" in only:
                results["sockets"] = socket_probe(overrides)
    results["counts"] = counts(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(results, indent=2))


def run_input_probes(root: Path) -> list[dict]:
    rows = []
    for name, args, expect in input_probes(root / "in"):
        corpus = root / "corpora" / str(len(rows))
        if expect.get("existing"):  # a corpus imported before, which a second import must keep
            assert slm("corpus", "import", args[0], "--generic", f"corpus.dir={corpus}").returncode == 0
        before = files_of(corpus)
        began = time.perf_counter()
        proc = slm("corpus", "import", args[0], "--generic", *args[1:], f"corpus.dir={corpus}")
        handled, said = judge_input(expect, proc, corpus, before)
        row = {"probe": name, "handled": handled, "said": said}
        if "error" in expect and not expect.get("needs_records"):
            # found without reading records: before Ray starts, for a local path (docs/corpus.md)
            row |= {"refused_before_ray": "[ray] started" not in proc.stdout + proc.stderr,
                    "seconds": round(time.perf_counter() - began, 1)}
        rows.append(row)
        print(f"[probe] input {name}: {'handled' if handled else 'NOT handled'} ({said})", file=sys.stderr, flush=True)
    return rows


def run_name_probes(root: Path) -> list[dict]:
    if not (root / "in" / "bom.jsonl").exists():
        input_probes(root / "in")  # writes the probe inputs (a name probe imports one of them)
    rows = []
    for name, value, words in NAME_PROBES:
        began = time.perf_counter()
        proc = slm("corpus", "import", str(root / "in" / "bom.jsonl"), "--domain", value, f"corpus.dir={root / 'names'}")
        text = proc.stdout + proc.stderr
        refused = (proc.returncode != 0 and all(w in text for w in words) and "Traceback" not in text
                   and "[ray]" not in text)  # before Ray starts
        rows.append({"probe": name, "refused_before_ray": refused, "seconds": round(time.perf_counter() - began, 1),
                     "said": text.strip().splitlines()[-1][:200] if text.strip() else ""})
    return rows


def run_config_probes(root: Path) -> list[dict]:
    rows = []
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
            rows.append({"probe": name, "refused": refused,
                         "said": text.strip().splitlines()[-1][:200] if text.strip() else ""})
    for name, body, word in YAML_PROBES:
        job = root / "job.yaml"
        job.write_text(body)
        proc = slm("config", str(job))
        text = proc.stdout + proc.stderr
        refused = proc.returncode != 0 and word in text and "Traceback" not in text
        rows.append({"probe": name, "refused": refused,
                     "said": text.strip().splitlines()[-1][:200] if text.strip() else ""})
    return rows


def counts(results: dict) -> dict:
    """Each section's tally, for the sections that ran."""
    def tally(section: str, key: str) -> str:
        rows = results[section]
        return f"{sum(bool(r.get(key)) for r in rows)} / {len(rows)}"

    out = {}
    if "artifacts" in results:
        out["corrupt artifacts detected in one line / tried"] = tally("artifacts", "detected_one_line")
    if "integrity" in results:
        out["corrupt artifacts remade or refused through the commands a user runs / tried"] = tally("integrity", "passed")
    if "stats_rerun" in results:
        out["stats stage skipped when current on a second `slm run`"] = results["stats_rerun"]["passed"]
    if "sockets" in results:
        out["sockets beyond the loopback (2-worker DDP on the embedded Ray)"] = len(results["sockets"]["beyond_loopback"])
    succeeded = ([r for r in results.get("integrity", []) if r["rc"] == 0]
                 + ([results["stats_rerun"]["first"], results["stats_rerun"]["second"]] if "stats_rerun" in results else [])
                 + ([results["sockets"]] if "sockets" in results and results["sockets"]["rc"] == 0 else []))
    if succeeded:
        out["successful runs that printed a traceback / successful runs"] = (
            f"{sum(r['traceback'] for r in succeeded)} / {len(succeeded)}")
    if "inputs" in results:
        out["bad inputs handled / tried"] = tally("inputs", "handled")
        out["inputs refused without reading records, before Ray starts / tried"] = (
            f"{sum(r.get('refused_before_ray', False) for r in results['inputs'])} / "
            f"{sum('refused_before_ray' in r for r in results['inputs'])}")
    if "names" in results:
        out["bad names refused before Ray / tried"] = tally("names", "refused_before_ray")
    if "config" in results:
        out["bad configs refused / tried"] = tally("config", "refused")
    return out


if __name__ == "__main__":
    main()
