"""``slm advise``'s command line, defined once: the CLI parses it, and the docs' quoted commands are read with it
(``slm docs``: a quoted answer is computed at the budgets its command asks, as written). Light on purpose — argparse
and shlex only — since the CLI builds every parser at start-up and ``slm.analysis.advise`` imports the fitting stack.
"""

from __future__ import annotations

import argparse
import shlex


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``slm advise``'s arguments: the CLI's, and what the docs' quoted commands are read with (``parse_command``)."""
    parser.add_argument("--sweep", required=True, help="a sweep folder or its results.parquet")
    parser.add_argument("--pretrain-budget", type=float, required=True, help="generic pretraining (FLOPs)")
    parser.add_argument("--specialization-budget", type=float, required=True, help="per domain (FLOPs)")
    parser.add_argument("--inference-budget", type=float, required=True, help="FLOPs per token served")
    parser.add_argument("--domain-tokens", type=int, required=True, help="in-domain tokens you have")
    parser.add_argument("--domains", type=int, default=1, help="N, the domains you will specialize for")
    parser.add_argument("--domain", help="only rows of this domain")
    parser.add_argument("--unit", choices=["flops", "device_seconds"], default="flops",
                        help="the unit of the pretraining and specialization budgets")


ASKED = ("pretrain_budget", "specialization_budget", "inference_budget", "domain_tokens", "domains", "domain", "unit")


def budgets_of(args: argparse.Namespace) -> dict:
    """What the command asks, as ``advise_each``'s keywords (its arguments but the sweep)."""
    return {k: getattr(args, k) for k in ASKED}


def parse_command(command: str) -> argparse.Namespace:
    """A quoted ``slm advise …`` command line (line continuations allowed) read with the CLI's own arguments."""
    parser = argparse.ArgumentParser(prog="slm advise", exit_on_error=False)
    add_arguments(parser)
    words = shlex.split(command.replace("\\\n", " "))
    if words[:2] != ["slm", "advise"] and not (words and words[0].endswith("/slm") and words[1:2] == ["advise"]):
        raise ValueError(f"not an `slm advise` command: {command!r}")
    return parser.parse_args(words[2:])
