"""The ``slm`` command: thin wrappers that parse, build a config and call one function.

    slm run JOB.yaml [key=value ...]            run a job spec's stages (locally or under ray job submit)
    slm config JOB.yaml [key=value ...]         print the resolved config
    slm corpus fetch|build [key=value ...]      the bundled corpus
    slm corpus import PATH (--generic | --domain NAME) [...]
    slm data embed|cluster|histogram|resample|tokenizer|pack [--config JOB.yaml] [key=value ...]
    slm data resample --domain D --tokens N --method crisp|dsir|uniform [...]
    slm train pretrain|specialize [--method M] [--source S] [--domain D] [--config JOB.yaml] [key=value ...]
    slm sweep JOB.yaml [--dry-run] [key=value ...]; slm report SWEEP; slm advise --sweep SWEEP ...;
    slm rate --tuned TABLES --size d2w256
    slm export MODEL --format hf OUT            a Hugging Face folder (transformers, offline)
    slm generate MODEL --prompt TEXT [...]      sample a continuation (an slm model or an exported folder)
    slm eval MODEL --domain D [...]             perplexity on D's valid split through lm-evaluation-harness

Each command imports what it runs inside its own function: `slm --help`, `slm config` and the corpus
commands stay quick, where the training stack (torch, Ray and their dependencies) takes seconds to import.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from slm.analysis import advise_command
from slm.artifacts import RunLockedError, atomic_write_json
from slm.config import ConfigError, check_name, dump_yaml
from slm.job import JobConfig, load_job
from slm.runtime import configure_output


def _load(path, overrides) -> JobConfig:
    """The job spec with its overrides, its method names checked too, before anything runs."""
    from slm.pipeline import (
        check_methods,  # imports torch: here, so that `slm --help` and `slm corpus` stay quick
    )

    cfg = load_job(path, overrides)
    check_methods(cfg)
    return cfg


def _job(args) -> JobConfig:
    return _load(getattr(args, "job", None) or getattr(args, "config", None), args.overrides)


def cmd_run(args) -> int:
    from slm.pipeline import check_stages, run_job

    cfg = _job(args)
    check_stages(cfg)
    run_job(cfg)
    return 0


def cmd_config(args) -> int:
    print(dump_yaml(_job(args)), end="")
    return 0


def cmd_corpus_fetch(args) -> int:
    from slm.corpus.build import fetch_all

    fetch_all(_job(args).corpus)
    return 0


def cmd_corpus_build(args) -> int:
    from slm.corpus.build import build

    build(_job(args).corpus, force=args.force)
    return 0


def cmd_corpus_import(args) -> int:
    from slm.corpus.layout import GENERIC
    from slm.data.importer import CorpusImportError, check_import, import_corpus
    from slm.runtime import init_ray, shutdown_ray

    cfg = _job(args)
    if args.generic and args.valid:
        raise ConfigError("--valid is a domain's valid split: use it with --domain")
    if not args.generic:  # before Ray starts (~35 s here): a name that cannot be a domain fails now
        check_name(args.domain, "--domain")
        if args.domain == GENERIC:
            raise ConfigError("--domain generic: 'generic' is the generic corpus; import it with --generic")
    domain = None if args.generic else args.domain
    try:  # the inputs and the target folder too, before Ray starts (docs/corpus.md)
        check_import(args.path, cfg.corpus.dir, domain, fmt=args.format, valid=args.valid, replace=args.replace,
                     on_error=args.on_error, text_column=args.text_column)
    except CorpusImportError as err:
        print(f"slm: corpus import: {err}", file=sys.stderr)
        return 1
    init_ray(cfg.ray)
    try:
        record = import_corpus(args.path, cfg.corpus.dir, domain,
                               fmt=args.format, text_column=args.text_column, source=args.source,
                               valid_fraction=cfg.corpus.valid_fraction, valid=args.valid, replace=args.replace,
                               max_doc_chars=cfg.corpus.max_doc_chars, on_error=args.on_error,
                               shard_docs=cfg.corpus.shard_docs)
    except Exception as err:  # the input's fault, named: a message, not a traceback (from inside Ray too)
        ours = our_refusal(err)
        if not isinstance(ours, CorpusImportError):
            raise
        print(f"slm: corpus import: {ours}", file=sys.stderr)
        return 1
    finally:
        shutdown_ray()
    print(json.dumps(record, indent=2))
    return 0


DATA_STAGES = ["stats", "embed", "cluster", "histogram", "resample", "tokenizer", "pack"]


def _run_one_stage(args, flags: tuple[tuple[str, str], ...], extra: list[str] = ()) -> int:
    """One stage on its own: the job's config (or the defaults), its flags as overrides, only that stage."""
    from slm.pipeline import run_job

    overrides = list(args.overrides) + list(extra)
    overrides += [f"{key}={getattr(args, flag)}" for flag, key in flags if getattr(args, flag) is not None]
    run_job(_load(args.config, overrides + [f"stages=[{args.stage}]"]))
    return 0


def cmd_data(args) -> int:
    if args.stage != "resample":
        return _run_one_stage(args, ())
    methods = [f"resample.methods=[{','.join(args.method)}]"] if args.method else []
    return _run_one_stage(args, (("domain", "resample.domain"), ("tokens", "resample.tokens")), methods)


def cmd_train(args) -> int:
    return _run_one_stage(args, (("method", "pretrain.method"), ("source", "specialize.source"),
                                 ("domain", "specialize.domain")))


def cmd_sweep(args) -> int:
    """A sweep spec's sweep and report (or, with --dry-run, its plan and estimated cost)."""
    from slm.pipeline import run_job
    from slm.tune.plan import format_plan
    from slm.tune.sweep import plan_sweep

    cfg = _load(args.job, list(args.overrides))
    if args.nodes < 1 or (args.nodes > 1 and not (args.dry_run and args.probe)):
        raise SystemExit("slm sweep: --nodes N (≥ 1) goes with --dry-run --probe: the estimate on N machines like this one")
    if bool(args.gpus) != bool(args.gpu_rates) or (args.gpus and not (args.dry_run and args.probe)) \
            or any(n < 1 for n in args.gpus or []):
        raise SystemExit("slm sweep: --gpus N [N …] (≥ 1) and --gpu-rates FILE go together, with --dry-run --probe")
    if args.dry_run:
        p = plan_sweep(cfg, check_data=False)
        print(format_plan(p))
        written = p.to_json()
        if args.probe:
            from slm.tune.estimate import format_estimate, probe_and_estimate

            gpu_rates = json.loads(Path(args.gpu_rates).read_text()) if args.gpu_rates else None
            written["wall_estimate"] = probe_and_estimate(cfg, p, args.nodes, tuple(args.gpus or ()), gpu_rates)
            # (beside the plan: Plan.from_json skips it)
            print(format_estimate(written["wall_estimate"]))
        if args.noise_from:
            from slm.analysis.power import format_power_of, power_from

            written["power"] = power_from(args.noise_from, p)  # beside the plan, as the estimate is
            print(format_power_of(written["power"]))
        if args.plan_out:
            atomic_write_json(args.plan_out, written)
            print(f"plan written to {args.plan_out}")
        return 0
    run_job(_load(args.job, list(args.overrides) + ["stages=[sweep, report]"]))
    return 0


def cmd_report(args) -> int:
    from slm.analysis.report import report, report_tables, sweep_folders

    paths = [*(args.sweep or []), *(args.tables or [])]
    if not paths:
        raise SystemExit("slm report: give a sweep folder, or several with --tables A B … (or a folder of them)")
    if len(paths) == 1 and not args.plan and len(sweep_folders(paths)) == 1:
        if args.beside:
            raise SystemExit("slm report: --beside sets two combined editions side by side: use --tables … --out")
        print(json.dumps(report(sweep_folders(paths)[0], args.out), indent=2))
        return 0
    if not args.out:
        raise SystemExit("slm report: several tables are combined into --out FOLDER (results, curves, plan and report)")
    written = report_tables(paths, args.out, args.plan)
    if args.beside:
        from slm.analysis.editions import write_side_by_side

        written["side_by_side"] = str(write_side_by_side(Path(args.beside), Path(args.out)))
    print(json.dumps(written, indent=2))
    return 0


def cmd_rate(args) -> int:
    from slm.analysis.tuning import rate_from_tables

    print(rate_from_tables(args.tuned, args.size, args.parametrization).text())
    return 0


def cmd_advise(args) -> int:
    from slm.analysis.advise import advise_sweep, format_each

    answers = advise_sweep(args.sweep, **advise_command.budgets_of(args))
    print(format_each(answers))
    return 0


def _quiet_libraries() -> None:
    """The model commands print one JSON record or the samples on stdout: no per-shard progress bars from
    transformers, and no warning from DeepSpeed (which transformers' save imports through accelerate),
    whose logger writes to stdout when it finds no GPU: told the CPU is the accelerator, it is quiet."""
    import torch
    from transformers.utils import logging as hf_logging

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def cmd_docs(args) -> int:
    """The docs' quote blocks rendered from the committed tables: checked (exit 1 on a difference) or written."""
    from slm.analysis import quote

    root = Path(args.root)
    paths = [Path(p) for p in args.docs] or None
    if args.action == "write":
        changed = quote.write(root, paths)
        print("\n".join(f"rewrote {p}" for p in changed) or "every quote block is already what the tables say")
        return 0
    diffs = quote.check(root, paths)
    print("\n".join(diffs) or "every quote block is what the tables say")
    return 1 if diffs else 0


def cmd_export(args) -> int:
    from slm.export import export_hf

    _quiet_libraries()
    record = export_hf(args.model, args.out, tokenizer=args.tokenizer, replace=args.replace)
    print(json.dumps(record, indent=2))
    return 0


def cmd_generate(args) -> int:
    from slm.export import Sampling, generate, load_causal_lm

    _quiet_libraries()
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                        seed=args.seed)
    model, tokenizer = load_causal_lm(args.model, args.tokenizer)
    for prompt, continuation in zip(args.prompt, generate(model, tokenizer, args.prompt, sampling), strict=True):
        print(f"{prompt}{continuation}")
        if len(args.prompt) > 1:
            print("---")
    return 0


def cmd_eval(args) -> int:
    from slm.harness import eval_domain, eval_sweep

    _quiet_libraries()
    if args.model and "=" in args.model and not os.path.exists(args.model):  # `--sweep S key=value`
        args.overrides, args.model = [args.model, *args.overrides], None
    cfg = _job(args)
    if (args.model is None) == (args.sweep is None):
        raise ConfigError("slm eval: give a MODEL, or --sweep SWEEP for every specialized model of its table")
    if args.sweep:
        result = eval_sweep(args.sweep, args.domain, cfg.corpus.dir, limit=args.limit, tokenizer=args.tokenizer)
    else:
        result = eval_domain(args.model, args.domain, cfg.corpus.dir, limit=args.limit, tokenizer=args.tokenizer,
                             out=args.out)
    print(json.dumps(result, indent=2))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slm", description="Small specialized language models under budgets, on Ray.")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="libraries' progress too: Ray Data's per-operator progress, Ray Train's report lines")
    sub = p.add_subparsers(dest="command", required=True)

    def with_overrides(sp, job_positional: bool):
        if job_positional:
            sp.add_argument("job", help="a job spec, e.g. jobs/quickstart.yaml")
        else:
            sp.add_argument("--config", help="a job spec whose sections to use (default: built-in defaults)")
        sp.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. corpus.dir=/data/c")
        return sp

    with_overrides(sub.add_parser("run", help="run a job spec's stages"), True).set_defaults(fn=cmd_run)
    with_overrides(sub.add_parser("config", help="print the resolved config"), True).set_defaults(fn=cmd_config)

    corpus = sub.add_parser("corpus", help="fetch, build or import a corpus").add_subparsers(dest="action", required=True)
    with_overrides(corpus.add_parser("fetch", help="download the bundled sources into corpus.cache_dir"),
                   False).set_defaults(fn=cmd_corpus_fetch)
    b = with_overrides(corpus.add_parser("build", help="extract the bundled corpus into corpus.dir"), False)
    b.add_argument("--force", action="store_true", help="rebuild even if complete and current")
    b.set_defaults(fn=cmd_corpus_build)
    imp = corpus.add_parser("import", help="import your own corpus as generic or as a domain")
    imp.add_argument("path", help="JSONL, Parquet, or a folder of text files (local, glob or s3://)")
    role = imp.add_mutually_exclusive_group(required=True)
    role.add_argument("--generic", action="store_true", help="import as the generic corpus")
    role.add_argument("--domain", help="import as this specialist domain (train/valid split by hash)")
    imp.add_argument("--format", choices=["jsonl", "parquet", "text"], help="default: from the path")
    imp.add_argument("--text-column", default="text")
    imp.add_argument("--source", help="the value of the source column (default: the file or folder name)")
    imp.add_argument("--valid", metavar="PATH", help="a domain's own valid split (JSONL, Parquet or text files, as "
                                                    "PATH); default: corpus.valid_fraction of PATH, chosen by hash")
    imp.add_argument("--replace", action="store_true", help="overwrite an existing generic corpus or domain")
    imp.add_argument("--on-error", choices=["skip", "fail"], default="skip",
                     help="a JSON Lines line that is not a record: quarantine it under the corpus and go on "
                          "(skip, the default), or stop naming it with nothing imported (fail)")
    with_overrides(imp, False)
    imp.set_defaults(fn=cmd_corpus_import)

    data = sub.add_parser("data", help="run one data stage (outputs under run.root/run.name)")
    data.add_argument("stage", choices=DATA_STAGES)
    data.add_argument("--domain", help="resample: the specialist domain")
    data.add_argument("--tokens", type=int, help="resample: the subset's size in tokens")
    data.add_argument("--method", action="append", choices=["crisp", "dsir", "uniform"],
                      help="resample: a selection method (repeatable)")
    with_overrides(data, False)
    data.set_defaults(fn=cmd_data)

    train = sub.add_parser("train", help="run one training stage (outputs under run.root/run.name)")
    train.add_argument("stage", choices=["pretrain", "specialize"])
    train.add_argument("--method", help="pretrain: the method (pretrain.method; an unknown one fails with the list)")
    train.add_argument("--source", help="specialize: a pretrained run name or model.safetensors (specialize.source)")
    train.add_argument("--domain", help="specialize: the domain (specialize.domain)")
    with_overrides(train, False)
    train.set_defaults(fn=cmd_train)

    sweep = with_overrides(sub.add_parser("sweep", help="run a budget sweep on Ray Tune, then its report"), True)
    sweep.add_argument("--dry-run", action="store_true", help="print the trial plan and estimated cost only")
    sweep.add_argument("--probe", action="store_true",
                       help="with --dry-run: time the plan's models on this machine (a minute or two) and estimate "
                            "the sweep's wall time from that")
    sweep.add_argument("--nodes", type=int, default=1,
                       help="with --dry-run --probe: also estimate the sweep on this many machines like this one")
    sweep.add_argument("--gpus", type=int, nargs="+",
                       help="with --dry-run --probe --gpu-rates: also estimate the sweep on each of these counts of "
                            "that GPU (runs to a GPU: 1 / train.gpus_per_worker)")
    sweep.add_argument("--gpu-rates", metavar="FILE",
                       help="a GPU's measured step times (benchmarks/gpu.py's JSON, e.g. "
                            "benchmarks/results/gpu_h200.json)")
    sweep.add_argument("--plan-out", help="with --dry-run: also write the plan as JSON (the rows `slm report --plan` "
                                          "checks a study's tables against)")
    sweep.add_argument("--noise-from", metavar="TABLE",
                       help="with --dry-run: each claim's power on this plan, at the seed noise a measured sweep "
                            "(its folder: results and plan.json) shows (slm.analysis.power; a minute or so)")
    sweep.set_defaults(fn=cmd_sweep)
    rep = sub.add_parser("report", help="plots, a summary and claims.md of a sweep's results (or several sweeps')")
    rep.add_argument("sweep", nargs="*", help="a sweep folder (runs/<run>/sweeps/<name>) or its results.parquet")
    rep.add_argument("--tables", nargs="+", metavar="SWEEP",
                     help="several sweeps' tables (folders, results.parquet files, or a folder of sweep folders) "
                          "read as one study: refused if they trained on different data")
    rep.add_argument("--plan", help="the whole design's plan.json (`slm sweep --dry-run --plan-out`): its trials "
                                    "missing from every table are named (default: the union of the tables' plans)")
    rep.add_argument("--out", help="where to write (default: <sweep>/report; with several tables: required)")
    rep.add_argument("--beside", metavar="REPORT",
                     help="another edition's report folder (an earlier `slm report --out`): writes "
                          "report/side_by_side.md, each claim and comparison of that edition beside this one's, "
                          "which verdicts change and why")
    rep.set_defaults(fn=cmd_report)
    adv = sub.add_parser("advise", help="which method and size win for your budgets, from a sweep")
    advise_command.add_arguments(adv)
    adv.set_defaults(fn=cmd_advise)
    rate = sub.add_parser("rate", help="the peak learning rate for your model's size, from a transfer sweep's tables")
    rate.add_argument("--tuned", required=True, help="a transfer sweep's tables (`slm report --tables … --out` of "
                                                     "jobs/sweeps/transfer.yaml's parts, or a sweep folder)")
    rate.add_argument("--size", required=True, help="your size: d<depth> or d<depth>w<width>")
    rate.add_argument("--parametrization", choices=["sp", "mup"], default="mup")
    rate.set_defaults(fn=cmd_rate)

    def model_argument(sp, optional: bool = False):
        sp.add_argument("model", nargs="?" if optional else None,
                        help="a model.safetensors, the training run's folder, or an exported folder")
        sp.add_argument("--tokenizer", help="the BPE file (default: <run>/tokenizer/tokenizer.json above the model)")
        return sp

    docs = sub.add_parser("docs", help="render the docs' quoted numbers from the committed tables (or check them)")
    docs.add_argument("action", choices=["check", "write"])
    docs.add_argument("docs", nargs="*", help="the docs to read (default: README.md and docs/*.md)")
    docs.add_argument("--root", default=".", help="the checkout whose tables and templates the docs quote")
    docs.set_defaults(fn=cmd_docs)
    exp = model_argument(sub.add_parser("export", help="write a model as a Hugging Face transformers folder"))
    exp.add_argument("--format", choices=["hf"], default="hf", help="hf: config.json, safetensors, tokenizer")
    exp.add_argument("out", help="the folder to write")
    exp.add_argument("--replace", action="store_true", help="overwrite an existing folder")
    exp.set_defaults(fn=cmd_export)
    gen = model_argument(sub.add_parser("generate", help="sample continuations of prompts"))
    gen.add_argument("--prompt", action="append", required=True, help="a prompt (repeatable)")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    gen.add_argument("--top-k", type=int, default=50, help="sample among the k likeliest tokens (0: all)")
    gen.add_argument("--seed", type=int, default=0)
    gen.set_defaults(fn=cmd_generate)
    ev = model_argument(sub.add_parser("eval", help="a domain's valid perplexity through lm-evaluation-harness"),
                        optional=True)
    ev.add_argument("--sweep", help="instead of MODEL: every specialized model of this sweep's results table for "
                                    "--domain, the harness's numbers added to the table as lm_eval_* columns")
    ev.add_argument("--domain", required=True, help="a domain of corpus.dir (its valid split)")
    ev.add_argument("--limit", type=int, help="the first N valid documents (by id) only")
    ev.add_argument("--out", help="the result JSON (default: <model folder>/lm_eval/<domain>.json)")
    with_overrides(ev, False)
    ev.set_defaults(fn=cmd_eval)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    # Overrides may come before or after flags (`slm data resample --domain x run.name=y`): argparse
    # fills the trailing positional early, so leftover key=value words are overrides too.
    args, extra = p.parse_known_args(argv)
    unknown = [a for a in extra if "=" not in a or a.startswith("-")]
    if unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:
        args.overrides = [*getattr(args, "overrides", []), *extra]
    configure_output(verbose=args.verbose)  # before anything imports Ray
    try:
        return args.fn(args)
    except ConfigError as err:
        print(f"slm: config error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `slm advise … | head`: the reader left; not an error of ours
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (so that the interpreter's final flush is quiet)
        return 0
    except (FileNotFoundError, FileExistsError, RunLockedError) as err:
        print(f"slm: {err}", file=sys.stderr)
        return 1
    except Exception as err:
        ours = our_refusal(err)
        if ours is None:  # a bug: its traceback
            raise
        print(f"slm: {'config error: ' if isinstance(ours, ConfigError) else ''}{ours}", file=sys.stderr)
        return 2 if isinstance(ours, ConfigError) else 1


# Our refusals: messages written for the user (a bad config, a corrupt artifact, an input that cannot be
# imported, tables of different data, a model the command cannot take, a cluster that would not take the
# driver), by module and class.
REFUSALS = (("slm.config", "ConfigError"), ("slm.artifacts", "ArtifactError"),
            ("slm.data.importer", "CorpusImportError"), ("slm.export", "Refusal"),
            ("slm.analysis.report", "CombineError"), ("slm.runtime", "ClusterUnreachable"))


def our_refusal(err: BaseException) -> BaseException | None:
    """One of our refusals, found where Ray wrapped it: raised inside a Ray task or actor it arrives as
    ``RayTaskError`` (the original in ``cause``), inside a Ray Data UDF as ``UserCodeException`` (raised
    from it), each with Ray's traceback text around our one line. None: not ours (a bug)."""
    kinds = tuple(getattr(sys.modules[m], n) for m, n in REFUSALS if m in sys.modules)
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if type(err).__module__.startswith("ray.") and (ours := _refusal_in_text(str(err))) is not None:
            return ours  # a Ray Data UDF's: only its text crossed back (UserCodeException keeps no cause)
        cause = getattr(err, "cause", None)  # first: Ray's wrapper is an instance of the cause's class too
        if isinstance(cause, BaseException):
            err = cause
            continue
        if isinstance(err, kinds):
            return err
        err = err.__cause__ or err.__context__
    return None


def _refusal_in_text(text: str) -> BaseException | None:
    """The last ``slm.<module>.<Class>: message`` line of a remote traceback, made again as that refusal."""
    import importlib

    found = None
    for match in re.finditer(r"^(slm(?:\.\w+)+)\.(\w+): (.+)$", text, re.MULTILINE):
        if (match.group(1), match.group(2)) in REFUSALS:
            found = match
    if found is None:
        return None
    return getattr(importlib.import_module(found.group(1)), found.group(2))(found.group(3))


if __name__ == "__main__":
    sys.exit(main())
