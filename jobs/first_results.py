"""First results at CPU scale, for one specialist domain (docs/results.md).

    slm run jobs/quickstart.yaml                      # the data side (once)
    python jobs/first_results.py [--domain legal] [--run quickstart] [key=value ...]

1. Small models (``--small-depth``) pretrained by generic, SLM-is (CRISP), SLM-mix, SLM-pn and
   Soup-of-Experts with the same pretraining FLOP budget (the dense model's cost of ``--pretrain-steps``;
   methods with a per-step overhead get fewer steps), each specialized on the same in-domain subset with
   the same specialization budget; plus distillation: a large model (``--large-depth``) pretrained and
   specialized, then teaching the small generic model on that subset.
2. SALT: the small generic model teaches the large one for the first ``--kd-steps`` steps (SALT-DS
   selection on); the baseline is the large model trained alone. Both are evaluated every
   ``--eval-every`` steps; the result is the step at which SALT reaches the baseline's final top-1 accuracy.

Every run is an ordinary stage of the platform (on Ray Train, 2 workers); extra ``key=value`` overrides
go to every stage. Writes ``runs/<run>/first_results.json`` and prints the Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="quickstart")
    ap.add_argument("--domain", default="legal")
    ap.add_argument("--small-depth", type=int, default=2)
    ap.add_argument("--large-depth", type=int, default=3)
    ap.add_argument("--pretrain-steps", type=int, default=150)
    ap.add_argument("--specialize-steps", type=int, default=60)
    ap.add_argument("--domain-tokens", type=int, default=50_000)
    ap.add_argument("--salt-steps", type=int, default=120)
    ap.add_argument("--kd-steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=20)
    args, overrides = ap.parse_known_args(argv)

    from slm.job import load_job
    from slm.pipeline import run_job
    from slm.train.budget import dense_flops_per_token
    from slm.train.trainer import gpt_config, packed, vocab_size

    base = [f"run.name={args.run}", f"resample.domain={args.domain}", "ray.include_dashboard=false", *overrides]
    cfg = load_job(None, base)
    run_dir = cfg.run.dir
    arrays = packed(run_dir, cfg, "generic")
    import numpy as np

    seq_len = int(np.load(arrays / "tokens.npy", mmap_mode="r").shape[1]) - 1
    small = gpt_config(cfg.pretrain.model.__class__(depth=args.small_depth), vocab_size(run_dir, cfg), seq_len)
    tokens_per_step = cfg.pretrain.train.batch_size * seq_len * cfg.pretrain.train.num_workers
    flops_budget = dense_flops_per_token(small) * tokens_per_step * args.pretrain_steps

    jobs = Path(__file__).resolve().parent

    def stage(job: str, *extra: str) -> dict:
        """One stage of a shipped job spec (jobs/<job>.yaml) with this experiment's overrides."""
        cfg = load_job(jobs / f"{job}.yaml", [*base, *extra])
        (name,) = cfg.stages
        return run_job(cfg)[name]

    pre = ["pretrain.train.eval_tokens=16384", "pretrain.train.checkpoint_every=50"]
    spec = [f"specialize.domain={args.domain}", f"specialize.domain_tokens={args.domain_tokens}",
            f"specialize.train.budget.steps={args.specialize_steps}", "specialize.train.eval_tokens=16384"]
    rows = {}
    for method in ("generic", "importance", "mixture", "projected", "soup"):
        p = stage("pretrain", f"pretrain.method={method}", f"pretrain.model.depth={args.small_depth}",
                  "pretrain.train.budget.steps=0", f"pretrain.train.budget.flops={flops_budget}", *pre)
        s = stage("specialize", f"specialize.source={p['name']}", *spec)
        rows[method] = {"pretrain": p, "specialize": s}
    # distillation: the large model, specialized, teaches the small generic one
    large = stage("pretrain", "pretrain.method=generic", f"pretrain.model.depth={args.large_depth}",
                  f"pretrain.train.budget.steps={args.pretrain_steps}", *pre)
    teacher = stage("specialize", f"specialize.source={large['name']}", *spec)
    distilled = stage("distill", f"specialize.source=generic-d{args.small_depth}",
                      f"specialize.name=distilled-d{args.small_depth}",
                      f"specialize.teacher.checkpoint={teacher['model']}", *spec)
    lora = stage("lora", f"specialize.source={large['name']}", f"specialize.name={large['name']}-lora", *spec)
    rows["distill"] = {"pretrain": rows["generic"]["pretrain"], "specialize": distilled,
                       "teacher": {"pretrain": large, "specialize": teacher}}
    rows["large"] = {"pretrain": large, "specialize": teacher}
    rows["large + LoRA"] = {"pretrain": large, "specialize": lora}

    # SALT vs the large baseline, evaluated along the way
    along = [f"pretrain.model.depth={args.large_depth}", f"pretrain.train.budget.steps={args.salt_steps}",
             f"pretrain.train.eval_every={args.eval_every}", "pretrain.train.eval_tokens=8192",
             "pretrain.train.checkpoint_every=0"]
    baseline = stage("pretrain", f"pretrain.name=baseline-d{args.large_depth}", *along)
    teacher_path = run_dir / "checkpoints" / f"generic-d{args.small_depth}" / "model.safetensors"
    salt = stage("salt", f"pretrain.name=salt-d{args.large_depth}", *along,
                 f"pretrain.teacher.checkpoint={teacher_path}", f"pretrain.teacher.kd_steps={args.kd_steps}")
    curves = {name: accuracy_curve(run_dir / "checkpoints" / name)
              for name in (f"baseline-d{args.large_depth}", f"salt-d{args.large_depth}")}
    target = curves[f"baseline-d{args.large_depth}"][-1][1]
    reached = next((s for s, a in curves[f"salt-d{args.large_depth}"] if a >= target), None)
    result = {"args": vars(args), "overrides": overrides, "pretrain_flops_budget": flops_budget,
              "methods": rows, "salt": {"baseline": baseline, "salt": salt, "curves": curves,
                                        "baseline_final_accuracy": target, "salt_steps_to_reach": reached}}
    (run_dir / "first_results.json").write_text(json.dumps(result, indent=2, default=str))
    print(markdown(result, args))
    return 0


def accuracy_curve(folder: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (folder / "logs" / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["eval.macro.accuracy"]) for r in rows if "eval.macro.accuracy" in r]


def markdown(result: dict, args) -> str:
    d = args.domain
    lines = [f"| method | pretrain PFLOPs | pretrain device-s | specialize device-s | {d} ppl before fine-tune "
             f"| {d} ppl | {d} top-1 | params served |", "|---|---|---|---|---|---|---|---|"]
    for name, r in result["methods"].items():
        p, s = r["pretrain"], r["specialize"]
        cost = dict(p["cost"])
        if "teacher" in r:  # the teacher's pretraining and specialization are part of the price
            for part in (r["teacher"]["pretrain"]["cost"], r["teacher"]["specialize"]["cost"]):
                cost = {k: cost[k] + part[k] for k in cost}
        lines.append(f"| {name} | {cost['flops'] / 1e15:.3f} | {cost['device_seconds']:.0f} "
                     f"| {s['cost']['device_seconds']:.0f} | {s['eval_before'][d]['perplexity']:.1f} "
                     f"| {s['eval'][d]['perplexity']:.1f} | {s['eval'][d]['accuracy']:.4f} | {s['params'] / 1e6:.2f}M |")
    salt = result["salt"]
    lines += ["", "| run | step | macro top-1 |", "|---|---|---|"]
    for name, curve in salt["curves"].items():
        lines += [f"| {name} | {s} | {a:.4f} |" for s, a in curve]
    lines.append("")
    lines.append(f"SALT reaches the baseline's final macro top-1 ({salt['baseline_final_accuracy']:.4f}) at step "
                 f"{salt['salt_steps_to_reach']} of {args.salt_steps}.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
