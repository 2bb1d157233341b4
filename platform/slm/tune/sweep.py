"""`slm sweep`: a budget sweep on Ray Tune.

1. **Plan** (``plan``): every pretraining run — one per (method, size), one per (size, domain) for SLM-is,
   whose pretraining set is the domain's CRISP subset — and every specialization trial: (pretraining
   run, pretraining budget, domain, in-domain tokens, specialization budget). Bad specs fail here,
   before anything runs: an unknown method or size, a zero budget, a size above the inference budget,
   a domain with no packed data. ``--dry-run`` prints the plan and its estimated cost.
2. **Pretraining**, paid once per run: trained to the largest pretraining budget with snapshots at the
   others (``pretrain.snapshot_steps``); a finished run is skipped, an interrupted one resumes. A
   sweep's models live in its own folder (``sweeps/<name>/checkpoints``, ``…/specialized``).
3. **Specialization trials** on Tune: a function trainable per trial, as in Ray's docs, that builds and
   fits a TorchTrainer (``slm.train.trainer.specialize``) and reports the row; Ray Train's intermediate
   reports reach Tune (``TuneReportCallback``) so ASHA can stop weak trials. The trainable asks Tune for
   a token CPU only: its TorchTrainer's workers hold the real resources. An interrupted sweep is resumed
   with ``Tuner.restore`` and runs only the trials that had not finished.
4. **Results table**: one row per trial, Parquet and CSV, with quality and the three costs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from slm.artifacts import atomic_write_json
from slm.config import ConfigError, JobConfig, config_hash, size_config, to_dict
from slm.tune.table import write_table


class SweepSpecError(ConfigError):
    """A sweep spec that cannot run; raised before any trial starts."""


def sweep_dir(cfg: JobConfig) -> Path:
    return cfg.run.dir / cfg.sweep.output / cfg.sweep.name


def pretrain_name(method: str, size: str, domain: str | None) -> str:
    return f"{method}-{domain}-{size}" if domain else f"{method}-{size}"


def seed_suffix(seed: int | None) -> str:
    """What a seed adds to a run's and a trial's name; nothing without a seed axis."""
    return "" if seed is None else f"-seed{seed}"


def plan(cfg: JobConfig, check_data: bool = True) -> dict:
    """Every pretraining run and trial of ``cfg.sweep``, validated, with estimated costs.
    ``check_data=False`` (a dry run on another machine than the cluster's) skips the packed-data checks."""
    from slm.models.gpt import ModelConfigError
    from slm.train.budget import dense_flops_per_token
    from slm.train.hardware import planning_peak
    from slm.train.trainer import gpt_config

    sw, run_dir = cfg.sweep, cfg.run.dir
    domains = sw.domains or cfg.resample.all_domains
    for d in domains if check_data else []:
        if not (run_dir / cfg.pack.output / "domain" / d / "data").exists():
            raise SweepSpecError(f"config key 'sweep.domains': {d!r} has no packed train data under "
                                 f"{run_dir / cfg.pack.output / 'domain' / d} (pack it with "
                                 f"`slm data pack resample.domain={d} 'pack.sets=[domain]'`)")
        if "importance" in sw.methods and d != cfg.resample.domain and not (
                run_dir / cfg.pack.output / "resampled" / d / "crisp" / "data").exists():
            raise SweepSpecError(f"config key 'sweep.methods': importance for {d!r} needs its CRISP subset "
                                 f"packed under {run_dir / cfg.pack.output / 'resampled' / d / 'crisp'}")
    vocab, seq_len = _vocab_and_seq_len(cfg)
    sizes = {}
    for size in sw.sizes:
        try:
            gpt = gpt_config(size_config(size), vocab, seq_len)
        except ModelConfigError as err:
            raise SweepSpecError(f"config key 'sweep.sizes': {size!r}: {err}") from err
        inference = dense_flops_per_token(gpt, training=False)
        if sw.inference_budget and inference > sw.inference_budget:
            raise SweepSpecError(f"config key 'sweep.sizes': {size!r} costs {inference:.3g} inference FLOPs per token, "
                                 f"over sweep.inference_budget={sw.inference_budget:.3g}")
        sizes[size] = {"train_flops_per_token": dense_flops_per_token(gpt), "inference_flops_per_token": inference}
    p_train, s_train = cfg.pretrain.train, cfg.specialize.train
    pre_tokens = p_train.batch_size * seq_len * max(1, p_train.num_workers)
    spec_tokens = s_train.batch_size * seq_len * max(1, s_train.num_workers)
    longest = max(sw.pretrain_steps)
    runs, trials = [], []
    for method in sw.methods:
        for size in sw.sizes:
            for domain in (domains if method in ("importance", "dsir") else [None]):
                base = pretrain_name(method, size, domain)
                for seed in sw.seeds or [None]:
                    name = base + seed_suffix(seed)
                    runs.append({"name": name, "method": method, "size": size, "domain": domain, "seed": seed,
                                 "steps": longest, "snapshots": sorted(set(sw.pretrain_steps)),
                                 "flops": sizes[size]["train_flops_per_token"] * pre_tokens * longest})
                    for steps in sorted(set(sw.pretrain_steps)):
                        for d in ([domain] if domain else domains):
                            for tokens in sorted(set(sw.domain_tokens)):
                                for k in sorted(set(sw.specialize_steps)):
                                    setting = f"{base}-p{steps}-t{tokens}-s{k}"
                                    trials.append({
                                        "source": name, "method": method, "size": size, "pretrain_steps": steps,
                                        "domain": d, "domain_tokens": tokens, "specialize_steps": k, "seed": seed,
                                        "setting": setting, "name": setting + seed_suffix(seed),
                                        "flops": sizes[size]["train_flops_per_token"] * spec_tokens * k})
    total = sum(r["flops"] for r in runs) + sum(t["flops"] for t in trials)
    peak = planning_peak(p_train)
    device_flops = peak.flops * sw.assumed_mfu
    return {"runs": runs, "trials": trials, "sizes": sizes,
            "estimate": {"pretrain_flops": sum(r["flops"] for r in runs),
                         "specialize_flops": sum(t["flops"] for t in trials), "total_flops": total,
                         "device_seconds": total / device_flops, "assumed_mfu": sw.assumed_mfu,
                         "peak_flops_per_device": peak.flops, "peak_flops_source": peak.source}}


def _vocab_and_seq_len(cfg: JobConfig) -> tuple[int, int]:
    """From the run's tokenizer and packed data, or the config when they are not made yet (a dry run)."""
    from slm.train.trainer import vocab_size

    tok = cfg.run.dir / cfg.tokenizer.output / "tokenizer.json"
    return (vocab_size(cfg.run.dir, cfg) if tok.exists() else cfg.tokenizer.vocab_size), cfg.pack.seq_len


def format_plan(p: dict) -> str:
    lines = [f"{len(p['runs'])} pretraining runs (each to its largest budget, snapshots at the others):"]
    lines += [f"  {r['name']:<32} {r['steps']:>7} steps  snapshots {r['snapshots']}  {r['flops']:.3g} FLOPs"
              for r in p["runs"]]
    lines.append(f"{len(p['trials'])} specialization trials:")
    lines += [f"  {t['name']:<48} domain {t['domain']:<12} {t['flops']:.3g} FLOPs" for t in p["trials"]]
    e = p["estimate"]
    lines.append(f"estimated cost: {e['pretrain_flops']:.3g} FLOPs pretraining + {e['specialize_flops']:.3g} "
                 f"specialization = {e['total_flops']:.3g} FLOPs ≈ {e['device_seconds'] / 3600:.3g} device-hours "
                 f"at {100 * e['assumed_mfu']:.0f}% of {e['peak_flops_per_device']:.3g} FLOP/s "
                 f"({e['peak_flops_source']})")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ running


def _pretrain_overrides(run: dict, sw) -> list[str]:
    model = size_config(run["size"])
    out = [f"pretrain.method={run['method']}", f"pretrain.name={run['name']}",
           f"pretrain.model.depth={model.depth}", f"pretrain.model.preset={model.preset}",
           f"pretrain.train.budget={{steps: {run['steps']}}}", f"pretrain.snapshot_steps={run['snapshots']}"]
    if run["domain"]:
        out.append(f"resample.domain={run['domain']}")
    if run["seed"] is not None:
        out.append(f"pretrain.train.seed={run['seed']}")
    return out


def _with(cfg: JobConfig, overrides: list[str]) -> JobConfig:
    from slm.config import apply_overrides, from_dict

    return from_dict(JobConfig, apply_overrides(to_dict(cfg), overrides))


def specialize_trial(config: dict) -> None:
    """The Tune function trainable: one specialization of one snapshot, on its own TorchTrainer."""
    import ray.tune

    from slm.train.callbacks import snapshot_path
    from slm.train.trainer import specialize

    t, job = config["trial"], config["job"]
    snapshot = snapshot_path(Path(job["run"]["root"]).expanduser() / job["run"]["name"] / job["pretrain"]["output"]
                             / t["source"], t["pretrain_steps"])
    cfg = _with(_from_job(job), [f"specialize.source={snapshot}", f"specialize.name={t['name']}",
                                 f"specialize.domain={t['domain']}", f"specialize.domain_tokens={t['domain_tokens']}",
                                 f"specialize.train.budget={{steps: {t['specialize_steps']}}}",
                                 *([f"specialize.train.seed={t['seed']}"] if t["seed"] is not None else [])])
    log = Path(config["trials_log"])
    with log.open("a") as f:  # an audit line per trial start: what a restored sweep ran again
        f.write(json.dumps({"trial": t["name"], "started": time.time()}) + "\n")
    m = specialize(cfg, cfg.run.dir)
    ray.tune.report(row(t, m, json.loads(Path(config["snapshots"][t["source"]]).read_text())))


def _from_job(job: dict) -> JobConfig:
    from slm.config import from_dict

    return from_dict(JobConfig, job)


def row(t: dict, m: dict, snapshots: dict) -> dict:
    snap = snapshots[str(t["pretrain_steps"])]
    pre, spec = snap["cost"], m["cost"]
    domain_specific = t["method"] in ("importance", "dsir")  # SLM-is: C_generic = 0, all of it per domain
    d = t["domain"]
    return {
        "trial": t["name"], "setting": t["setting"], "seed": t["seed"], "method": t["method"], "size": t["size"], "params": m["params"],
        "inference_flops_per_token": m["inference_flops_per_token"], "pretrain_steps": t["pretrain_steps"],
        "pretrain_flops": pre["flops"], "pretrain_device_seconds": pre["device_seconds"],
        "generic_flops": 0.0 if domain_specific else pre["flops"],
        "generic_device_seconds": 0.0 if domain_specific else pre["device_seconds"],
        "domain": d, "domain_tokens": t["domain_tokens"], "specialize_steps": t["specialize_steps"],
        "specialize_flops": spec["flops"], "specialize_device_seconds": spec["device_seconds"],
        "per_domain_flops": spec["flops"] + (pre["flops"] if domain_specific else 0.0),
        "per_domain_device_seconds": spec["device_seconds"] + (pre["device_seconds"] if domain_specific else 0.0),
        "perplexity": m["eval"][d]["perplexity"], "accuracy": m["eval"][d]["accuracy"],
        "perplexity_before": m["eval_before"][d]["perplexity"], "accuracy_before": m["eval_before"][d]["accuracy"],
        # what a scheduler compares (ASHA's intermediate reports carry the training loss at "step")
        "loss": m["eval"][d]["loss"], "step": t["specialize_steps"],
    }


def concurrency(cfg: JobConfig) -> int:
    import ray

    if cfg.sweep.max_concurrent_trials:
        return cfg.sweep.max_concurrent_trials
    t = cfg.specialize.train
    resources = ray.cluster_resources()
    if t.use_gpu:
        return max(1, int(resources.get("GPU", 1) // max(1, t.num_workers)))
    return max(1, int(resources.get("CPU", 1) // (max(1, t.num_workers) * t.cpus_per_worker)))


def run_sweep(cfg: JobConfig) -> dict:
    """Plan, pretrain what is missing, run (or resume) the trials on Tune, write the results table."""
    import ray.tune
    from ray.tune import RunConfig as TuneRunConfig
    from ray.tune import TuneConfig, Tuner

    from slm.runtime import init_ray
    from slm.train.callbacks import snapshot_path
    from slm.train.trainer import pretrain

    # Tune runs each trial in its own folder: every path a trial reads must be absolute. A sweep's runs
    # live under its own folder, so that they never overwrite the run directory's other checkpoints.
    here = f"{cfg.sweep.output}/{cfg.sweep.name}"
    cfg = _with(cfg, [f"run.root={Path(cfg.run.root).expanduser().resolve()}",
                      f"corpus.dir={Path(cfg.corpus.dir).expanduser().resolve()}",
                      f"pretrain.output={here}/checkpoints", f"specialize.output={here}/specialized"])
    p = plan(cfg)
    print(format_plan(p), flush=True)
    out = sweep_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "plan.json", p)
    init_ray(cfg.ray)
    snapshots = {}
    for run in p["runs"]:
        pre_cfg = _with(cfg, _pretrain_overrides(run, cfg.sweep))
        pretrain(pre_cfg, pre_cfg.run.dir)
        output = cfg.run.dir / cfg.pretrain.output / run["name"]
        missing = [s for s in run["snapshots"] if not snapshot_path(output, s).exists()]
        if missing:  # fail here, not in every trial that would start from them
            raise RuntimeError(f"sweep: pretraining run {run['name']} finished without snapshots at steps {missing} "
                               f"in {output / 'snapshots'}; delete {output} and rerun")
        snapshots[run["name"]] = str(output / "snapshots" / "snapshots.json")
    storage = cfg.sweep.storage_path or str((out / "tune").resolve())
    trainable = ray.tune.with_resources(specialize_trial, {"cpu": 0.01})  # its TorchTrainer holds the CPUs
    # The experiment is keyed on the plan: a changed spec starts afresh instead of restoring another one.
    name = f"{cfg.sweep.name}-{config_hash({'trials': p['trials'], 'specialize': to_dict(cfg.specialize)})[:8]}"
    experiment = f"{storage.rstrip('/')}/{name}"
    if Tuner.can_restore(experiment):
        print(f"[sweep] resuming {experiment}: only unfinished trials run", flush=True)
        tuner = Tuner.restore(experiment, trainable=trainable, resume_errored=True)
    else:
        scheduler = None
        if cfg.sweep.scheduler == "asha":
            from ray.tune.schedulers import ASHAScheduler

            scheduler = ASHAScheduler(time_attr="step", max_t=max(cfg.sweep.specialize_steps), grace_period=1)
        tuner = Tuner(
            trainable,
            param_space={"trial": ray.tune.grid_search(p["trials"]), "job": to_dict(cfg), "snapshots": snapshots,
                         "trials_log": str((out / "trials.log").resolve())},
            tune_config=TuneConfig(metric="loss" if scheduler else None, mode="min" if scheduler else None,
                                   scheduler=scheduler, max_concurrent_trials=concurrency(cfg)),
            run_config=TuneRunConfig(name=name, storage_path=storage),
        )
    grid = tuner.fit()
    rows = [r.metrics for r in grid if r.metrics and "perplexity" in r.metrics]
    failed = [str(r.error) for r in grid if r.error]
    table = write_table(rows, out)
    print(f"[sweep] {len(rows)} of {len(p['trials'])} trials finished; results in {table}", flush=True)
    if failed:  # the table keeps what finished; the stage fails so that scripts and CI see it
        raise RuntimeError(f"sweep: {len(failed)} of {len(p['trials'])} trials failed (the results table holds the "
                           f"{len(rows)} that finished; rerun the same command to retry only them). First error:\n"
                           f"{failed[0][-2000:]}")
    return {"trials": len(p["trials"]), "finished": len(rows), "failed": len(failed), "results": str(table)}
