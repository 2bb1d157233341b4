"""Model benchmarks (issues 4 and 15): Soup-of-Experts step overhead, instantiated-model forward, CPU MFU.

    python benchmarks/models.py [--quick] [--out benchmarks/results/models.json]

Prints one JSON object. Ratios are measured in one run with interleaved repetitions (this machine is
shared and noisy): each configuration's median step time over the same number of repetitions. Steps run
under the training defaults as this machine resolves them (``precision: auto``, ``compile: auto`` for a
long run: ``slm.train.hardware``), and MFU is against the matmul peak of that precision, probed here.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from timing import interleaved  # this folder's module (a script's folder is on sys.path)

from slm.models import GPT, SoupOfExperts, preset
from slm.models.soup import DomainPrior
from slm.train import hardware
from slm.train.config import TrainConfig

DEFAULTS = TrainConfig()
PRECISION = hardware.worker_precision(DEFAULTS, "cpu", "train.precision")
COMPILED = hardware.resolve_compile(DEFAULTS.compile, "cpu", PRECISION, None, None).enabled


def make_step(model, batch_size, seq_len, vocab, kind, n_domains=None):
    if COMPILED:
        model.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as the trainer runs it
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    y = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    prior = DomainPrior(n_domains, 2) if kind == "soup" else None

    def step():
        t = time.perf_counter()
        with hardware.autocast(PRECISION, "cpu"):
            loss = model(x, prior.sample(), y).loss if kind == "soup" else model(x, y).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    reps = 2 if args.quick else 5
    cfg = preset("cpu-small")
    n_domains = 16
    result: dict = {"machine": {"threads": torch.get_num_threads(), "torch": torch.__version__,
                                "processor": platform.processor() or platform.machine()},
                    "model": "cpu-small", "seq_len": cfg.seq_len, "optimizer": "AdamW(fused=True)",
                    "repetitions": reps, "precision": PRECISION, "compiled": COMPILED}

    peak = hardware.matmul_flops(torch.device("cpu"), torch.bfloat16 if PRECISION == "bf16" else torch.float32)
    result["matmul_peak_gflops"] = round(peak / 1e9, 1)

    # --- Soup-of-Experts step ÷ dense step, same batch. Each soup is timed in alternation with its own
    # dense baseline and nothing else alive: a large soup's step (n+1 copies of the weights through
    # Adam) slows whatever runs right after it, so mixing all configurations in one loop biased them.
    dense_params = GPT(cfg).num_params()
    soup_rows = []
    for batch_size in (8, 32):
        dense_step = make_step(GPT(cfg), batch_size, cfg.seq_len, cfg.vocab_size, "dense")
        for n in (4, 8, 16):
            soup = SoupOfExperts(cfg, n_experts=n, n_domains=n_domains, expert_init_std=0.02)
            soup_step = make_step(soup, batch_size, cfg.seq_len, cfg.vocab_size, "soup", n_domains)
            med = interleaved({"dense": dense_step, "soup": soup_step}, reps)
            del soup, soup_step
            c = 6 * cfg.seq_len  # training FLOPs per parameter per sequence
            soup_rows.append({"n_experts": n, "batch": batch_size, "dense_step_s": round(med["dense"], 3),
                              "soup_step_s": round(med["soup"], 3), "ratio": round(med["soup"] / med["dense"], 3),
                              "model_1_plus_15n_over_Cb": round(1 + 15 * n / (c * batch_size), 4)})
            result[f"soup_overhead_n{n}_b{batch_size}"] = soup_rows[-1]["ratio"]
        if batch_size == 32:
            dense_s = statistics.median(r["dense_step_s"] for r in soup_rows if r["batch"] == 32)
            tokens = batch_size * cfg.seq_len
            result["dense_train_tokens_per_s"] = round(tokens / dense_s, 1)
            result["dense_train_mfu"] = round(GPT(cfg).flops_per_token(training=True) * tokens / dense_s / peak, 4)
        del dense_step
    result["soup_rows"] = soup_rows
    result["dense_params"] = dense_params

    # --- An instantiated model's forward ÷ a freshly built dense model's forward.
    soup = SoupOfExperts(cfg, n_experts=8, n_domains=n_domains, expert_init_std=0.02)
    inst = soup.instantiate(DomainPrior(n_domains, 2, seed=1).sample()).eval()
    dense = GPT(cfg).eval()
    x = torch.randint(0, cfg.vocab_size, (8, cfg.seq_len))

    def fwd(model):
        def run():
            t = time.perf_counter()
            with torch.no_grad(), hardware.autocast(PRECISION, "cpu"):
                model(x)
            return time.perf_counter() - t
        return run

    med = interleaved({"instantiated": fwd(inst), "dense": fwd(dense)}, reps=5 if args.quick else 10)
    result["instantiated_forward_ratio"] = round(med["instantiated"] / med["dense"], 3)
    tokens = x.numel()
    result["dense_forward_mfu"] = round(dense.flops_per_token(training=False) * tokens / med["dense"] / peak, 4)

    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
