"""``slm eval``: a model's perplexity on a domain's valid split through EleutherAI's lm-evaluation-harness,
beside the platform's own measure of the same documents.

The harness scores the exported model (its ``hf`` backend on the folder ``slm export`` writes, offline)
on a task defined here: the domain's valid documents as a local JSON-lines file, ``loglikelihood_rolling``
(each document from its start, after the ``<|endoftext|>`` prefix, in windows of the model's context), and
the harness's word perplexity, byte perplexity and bits per byte.

The platform's own measure (:func:`slm.train.evaluate.evaluate`, what training reports) packs the same
documents end to end, each followed by ``<|endoftext|>``, into rows of ``seq_len + 1`` tokens, and averages
the cross-entropy per token. To compare, it is put in bits per byte: nats per token × tokens per byte of
the same text / ln 2. The two differ by protocol, not by model: the packed rows predict the separator
tokens too, and a row's first tokens see the end of the previous document instead of a fresh start (the
harness resets the context at each document). docs/usage.md gives the difference measured.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from tokenizers import Tokenizer

from slm.artifacts import atomic_write_json
from slm.corpus.layout import domain_dir
from slm.data.pack import pack_texts
from slm.export import EXPORT_RECORD, HF_CONFIG, Refusal, export_hf, load_exportable
from slm.log import logger
from slm.records.table import add_columns, read_table
from slm.train.data import PackedArrays
from slm.train.evaluate import evaluate

log = logger(__name__)

# Each metric with the harness's aggregation for it (perplexities weighted by each document's words or bytes).
METRICS = {"word_perplexity": "weighted_perplexity", "byte_perplexity": "weighted_perplexity",
           "bits_per_byte": "bits_per_byte"}


def valid_documents(corpus_dir: str | Path, domain: str, limit: int | None = None) -> list[str]:
    """The domain's valid split, in id order (the order the files hold is not a contract)."""
    folder = domain_dir(corpus_dir, domain, "valid")
    files = sorted(folder.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no Parquet files: is '{domain}' a domain of the corpus at "
                                f"{corpus_dir}? (`slm corpus build` or `slm corpus import --domain`)")
    table = pq.read_table(files, columns=["id", "text"]).sort_by("id")
    texts = table.column("text").to_pylist()
    return texts[:limit] if limit else texts


def task_config(domain: str, documents_jsonl: Path) -> dict:
    """The harness task: the documents' perplexity, from a local file (no dataset hub)."""
    return {
        "task": f"slm_{domain}_valid",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"validation": str(documents_jsonl)}},
        "validation_split": "validation",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": m, "aggregation": agg, "higher_is_better": False} for m, agg in METRICS.items()],
        "metadata": {"version": 1.0},
    }


def harness_perplexity(hf_dir: Path, domain: str, documents: list[str], work: Path,
                       batch_size: int = 8) -> dict[str, float]:
    """lm-eval's word / byte perplexity and bits per byte of ``documents`` under the exported model."""
    try:
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as err:
        raise Refusal("slm eval needs lm-evaluation-harness: pip install 'slm-platform[eval]' "
                      f"(or lm_eval==0.4.13) ({err})") from err

    class QuietHFLM(HFLM):
        # lm-eval 0.4.13's loglikelihood_rolling asks for a progress bar per batch of windows
        # (disable_tqdm=False, hard-coded): hundreds of bars in a log.
        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            return super().loglikelihood_rolling(requests, disable_tqdm=True)

        def _loglikelihood_tokens(self, requests, disable_tqdm=False, override_bs=None):
            return super()._loglikelihood_tokens(requests, disable_tqdm=True, override_bs=override_bs)

    import datasets  # lm-eval's own dependency, so here with it
    import lm_eval.api.task
    from tqdm import tqdm

    datasets.disable_progress_bars()  # "Generating validation split" for a file of a few hundred lines
    # lm-eval 0.4.13 builds a task's requests under a bar with no way to turn it off (one carriage-return
    # line per document set in a log); its module's name for tqdm is the only handle.
    lm_eval.api.task.tqdm = partial(tqdm, disable=True)

    jsonl = work / f"{domain}_valid.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents))
    # add_bos_token=False: the rolling loglikelihood puts <|endoftext|> (the prefix token) before each
    # document itself; the export's tokenizer adding it too would score it as the document's first token.
    model = QuietHFLM(pretrained=str(hf_dir), dtype="float32", batch_size=batch_size, device="cpu",
                      local_files_only=True, add_bos_token=False)
    results = simple_evaluate(model=model, tasks=[task_config(domain, jsonl)],
                              task_manager=TaskManager(verbosity="ERROR"), log_samples=False, bootstrap_iters=0)
    scores = results["results"][f"slm_{domain}_valid"]
    return {m: float(scores[f"{m},none"]) for m in METRICS}


def platform_perplexity(hf_dir: Path, documents: list[str], batch_size: int = 8) -> dict[str, float]:
    """The platform's measure of the same documents (see the module's docstring), with the exported
    model's tokenizer and the dense model it was exported from."""
    record = json.loads((hf_dir / EXPORT_RECORD).read_text())
    model = load_exportable(Path(record["source"]))
    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    rows = pack_texts(tok, documents, model.config.seq_len)
    packed = PackedArrays(rows, np.zeros(len(rows), np.int32), np.zeros(len(rows), np.int32))
    metrics = evaluate(lambda _domain: (lambda x: model(x).logits), {"valid": packed}, max_tokens=0,
                       batch_size=batch_size, device=torch.device("cpu"))["valid"]
    stream_tokens = sum(len(e.ids) + 1 for e in tok.encode_batch(documents, add_special_tokens=False))
    stream_bytes = sum(len(t.encode("utf-8")) for t in documents)
    return {"token_perplexity": metrics["perplexity"], "tokens": metrics["tokens"],
            "bits_per_byte": metrics["loss"] * stream_tokens / stream_bytes / math.log(2)}


def eval_sweep(sweep: str | Path, domain: str, corpus_dir: str | Path, limit: int | None = None,
               tokenizer: str | Path | None = None) -> dict:
    """Every specialized model of a sweep's results table for ``domain`` through the harness, its
    numbers added to the table as columns ``lm_eval_<metric>`` (``slm.records.table.add_columns``)."""
    sweep = Path(sweep)
    trials = sorted(r["trial"] for r in read_table(sweep) if r["domain"] == domain)
    if not trials:
        raise Refusal(f"{sweep}: the results table has no trial of domain {domain!r}")
    values, started = {}, time.perf_counter()
    for trial in trials:
        model = sweep / "specialized" / domain / trial
        result = eval_domain(model, domain, corpus_dir, limit=limit, tokenizer=tokenizer)
        values[trial] = {f"lm_eval_{k}": v for k, v in result["lm_eval"].items()}
        log.info(f"[eval] {trial}: bits per byte {result['lm_eval']['bits_per_byte']:.4f}")
    table = add_columns(sweep, values)
    return {"sweep": str(sweep), "domain": domain, "trials": len(trials), "columns": sorted(next(iter(values.values()))),
            "table": str(table), "seconds": round(time.perf_counter() - started, 1)}


def eval_domain(model: str | Path, domain: str, corpus_dir: str | Path, limit: int | None = None,
                tokenizer: str | Path | None = None, out: str | Path | None = None) -> dict:
    """Both measures of ``model`` (an slm checkpoint, its run folder, or an exported folder) on the
    domain's valid split; written as JSON to ``out`` (default: ``lm_eval/<domain>.json`` in the folder given,
    or beside the checkpoint file given). ``model`` in the result is what was given; ``source`` the checkpoint
    an export was made from."""
    started = time.perf_counter()
    documents = valid_documents(corpus_dir, domain, limit)
    path = Path(model).expanduser()
    with tempfile.TemporaryDirectory(prefix="slm-eval-") as work:
        work = Path(work)
        if (path / HF_CONFIG).is_file():
            hf_dir = path
        else:
            hf_dir = work / "hf"
            export_hf(path, hf_dir, tokenizer)
        harness = harness_perplexity(hf_dir, domain, documents, work)
        record = hf_dir / EXPORT_RECORD
        source = json.loads(record.read_text())["source"] if record.is_file() else None
        # The platform's measure runs our own model: the export's source checkpoint, if it is still there.
        ours = platform_perplexity(hf_dir, documents) if source and Path(source).is_file() else None
    result = {"model": str(path), "source": source, "domain": domain, "documents": len(documents),
              "bytes": sum(len(t.encode("utf-8")) for t in documents), "lm_eval": harness,
              "platform": ours if ours else f"not measured: the export's source checkpoint {source} is not here",
              "bits_per_byte_relative_difference": ours["bits_per_byte"] / harness["bits_per_byte"] - 1 if ours else None,
              "seconds": round(time.perf_counter() - started, 1)}
    # Beside what was given (an export's own folder, not its source checkpoint's), named after it.
    folder = path if path.is_dir() else path.parent
    target = Path(out) if out else folder / "lm_eval" / f"{domain}.json"
    atomic_write_json(target, result)
    return {**result, "written": str(target)}
