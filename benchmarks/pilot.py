"""The study's pilot (issue 16): where does the generic small model saturate on the whole bundled corpus?

    python benchmarks/pilot.py [--sizes d1 d2] [--steps 250 500 1000 2000 4000] [--vocab 4096]
                               [--run-dir runs/pilot] [--out benchmarks/results/pilot.json]

The papers' crossovers need a regime where the small generic model has saturated: its valid loss changes
by < 1% over the last doubling of its pretraining budget. The pilot measures that curve before the study
is designed, with the protocol fixed here: the generic model trained on **every generic document of the
corpus** (packed from the text: generic pretraining needs no embedding), one fresh run per budget (each
with its own warm-up and cosine decay to the end, as a run of that budget would be), the same seed,
batch and learning rate for all; the valid loss is the mean over the bundled domains' valid splits of
the log-perplexity the trainer reports. For each size the JSON lists each budget's tokens, valid loss,
training tokens/s, and the relative change of the loss over each doubling; ``saturated`` is whether the
last doubling changed it by less than 1%.

Each run trains in its own process without Ray Train (``pretrain.train.num_workers=0``), as a Ray task of
``--threads`` threads, as many at once as the machine's cores allow (the study's sweep runs its
pretraining the same way): the pilot measures the model, not Ray Train's start-up. Runs that finished are
read back, not retrained, so an interrupted pilot resumes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--run-dir", default="runs/pilot")
    ap.add_argument("--sizes", nargs="+", default=["d1", "d2"])
    ap.add_argument("--steps", nargs="+", type=int, default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run (runs go in parallel)")
    ap.add_argument("--seed", type=int, default=0, help="the runs' training seed (init and data order)")
    ap.add_argument("--out")
    args = ap.parse_args()

    import ray

    from slm.corpus.layout import corpus_files
    from slm.data.pack import pack
    from slm.job import load_job
    from slm.pipeline import STAGES
    from slm.tune.report import SATURATED  # the relative change over the last doubling

    run_dir = Path(args.run_dir).resolve()
    common = [f"run.root={run_dir.parent}", f"run.name={run_dir.name}", f"corpus.dir={args.corpus}",
              f"tokenizer.vocab_size={args.vocab}", "tokenizer.max_chars=20000000", f"pack.seq_len={args.seq_len}",
              "pack.sets=[valid]"]
    cfg = load_job(None, common)
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    started = time.perf_counter()
    if not (run_dir / "tokenizer" / "tokenizer.json").exists():
        STAGES["tokenizer"](cfg, run_dir)
    text = run_dir / "packed" / "generic-text"
    if not (text / "manifest.json").exists():
        pack(corpus_files(args.corpus)["all"], run_dir / "tokenizer" / "tokenizer.json", args.seq_len, text)
    if not (run_dir / "packed" / "valid").exists():
        STAGES["pack"](cfg, run_dir)
    data_seconds = time.perf_counter() - started
    generic = json.loads((text / "manifest.json").read_text())

    def name(size: str, steps: int) -> str:
        return (f"pilot-{size}-s{steps}" if args.batch == 8 else f"pilot-{size}-b{args.batch}-s{steps}") \
            + (f"-seed{args.seed}" if args.seed else "")

    def job(size: str, steps: int):
        return load_job(None, common + [
            f"pretrain.name={name(size, steps)}", f"pretrain.data={text}", f"pretrain.model.depth={int(size[1:])}",
            "pretrain.train.num_workers=0", f"pretrain.train.torch_threads={args.threads}",
            f"pretrain.train.batch_size={args.batch}", f"pretrain.train.budget.steps={steps}",
            f"pretrain.train.seed={args.seed}",
            f"pretrain.train.optim.lr={args.lr}", f"pretrain.train.optim.warmup_steps={max(10, steps // 20)}",
            f"pretrain.train.log_every={max(10, steps // 20)}", "pretrain.train.checkpoint_every=0",
            "pretrain.train.eval_tokens=65536"])

    todo = [job(size, steps) for size in args.sizes for steps in sorted(args.steps)
            if not (run_dir / "checkpoints" / name(size, steps) / "summary.json").exists()]
    # Longest first: the last runs to start are the short ones, so the cores stay busy to the end.
    todo.sort(key=lambda j: -j.pretrain.train.budget.steps)
    task = ray.remote(STAGES["pretrain"]).options(num_cpus=args.threads, max_retries=0)
    ray.get([task.remote(j, run_dir) for j in todo])
    ray.shutdown()

    result: dict = {"machine": {"cpus": os.cpu_count()}, "protocol": {
        "data": "every generic document of the corpus, packed from the text", "sequences": generic["sequences"],
        "tokens": generic["tokens"], "vocab": args.vocab, "seq_len": args.seq_len, "batch": args.batch,
        "lr": args.lr, "runs": "one per budget, warm-up then cosine decay over it", "seed": args.seed,
        "threads_per_run": args.threads, "runs_at_once": max(1, (os.cpu_count() or 1) // args.threads),
        "valid_loss": "mean over the domains' valid splits of log perplexity", "saturated_below": SATURATED},
        # This invocation's data preparation (0 when an earlier one made it) and the packing of the
        # generic text as recorded when it was made.
        "data_seconds_this_run": round(data_seconds, 1), "generic_pack_seconds": generic["seconds"], "sizes": {}}
    for size in args.sizes:
        curve = []
        for steps in sorted(args.steps):
            summary_path = run_dir / "checkpoints" / name(size, steps) / "summary.json"
            summary = json.loads(summary_path.read_text())
            domains = {d: v for d, v in summary["eval"].items() if d != "macro"}  # the trainer's own mean
            losses = [math.log(v["perplexity"]) for v in domains.values()]
            curve.append({"steps": steps, "tokens": steps * args.batch * args.seq_len,
                          "valid_loss": round(sum(losses) / len(losses), 5),
                          "per_domain_ppl": {d: round(v["perplexity"], 2) for d, v in domains.items()},
                          "tokens_per_s": round(summary["tokens"] / summary["cost"]["device_seconds"], 1)})
        for before, after in itertools.pairwise(curve):
            after["change_over_doubling"] = round((after["valid_loss"] - before["valid_loss"]) / before["valid_loss"], 5)
        last = curve[-1].get("change_over_doubling")
        result["sizes"][size] = {"curve": curve, "saturated": last is not None and abs(last) < SATURATED}
        print(json.dumps({size: result["sizes"][size]}, indent=2), flush=True)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
