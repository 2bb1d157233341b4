"""Losses: the objective a run optimizes (next-token cross-entropy, label smoothing, z-loss), and knowledge
distillation with the SALT schedule.

KD is the forward KL from the teacher's distribution at temperature ρ to the student's, per token:

    KD = Σ_v p_T^(ρ)(v) · (log p_T^(ρ)(v) − log p_S(v)),   p_T^(ρ) = softmax(z_T / ρ)

and the loss while KD is on is (1 − ω)·CE + ω·KD. Distillation keeps KD for the whole run (kd_steps = 0);
SALT keeps it for the first n_KD steps, then either drops it at once (``step``) or has decayed ω
linearly to 0 over those steps (``linear``), and trains on CE alone afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from slm.models.gpt import LMOutput, cross_entropy, token_logprobs


@dataclass
class KDSchedule:
    omega: float
    kd_steps: int = 0  # 0: KD at every step
    transition: str = "step"

    def weight(self, step: int) -> float:
        """ω at ``step`` (0-based)."""
        if self.kd_steps == 0:
            return self.omega
        if step >= self.kd_steps:
            return 0.0
        if self.transition == "linear":
            return self.omega * (1.0 - step / self.kd_steps)
        return self.omega


@dataclass
class Losses:
    """One step's objective: what is optimized (``loss``), the plain next-token cross-entropy (``ce``, logged by
    every run whatever it optimizes), and each further term under its own name (``smoothed_ce``, ``z_loss``,
    ``kd``) while it is on."""

    loss: torch.Tensor
    ce: torch.Tensor
    terms: dict[str, torch.Tensor]


class Objective:
    """The loss, computed in one place (``slm.train.config.ObjectiveConfig``, the teacher's ρ):

        data = (1 − ε)·CE + ε·mean_v(−log p_v) + z·mean(log² Z)      (ε, z: label smoothing, z-loss; 0: plain CE)
        loss = (1 − ω)·data + ω·KD                                  while a teacher is on (ω > 0), else data

    ``data`` is what a model computes in its forward (it is called with it, so a compiled model's graph holds its
    loss, as it held the cross-entropy before); ``with_teacher`` adds the KD term outside it (ω changes step by step
    under SALT's linear transition: inside a compiled graph it would recompile it). At its defaults the loss is the
    cross-entropy itself, the same float operations as before it existed. A method changes it by its ``objective``
    hook, never by computing a loss."""

    def __init__(self, label_smoothing: float = 0.0, z_loss: float = 0.0, temperature: float = 1.0):
        self.label_smoothing, self.z_loss, self.temperature = label_smoothing, z_loss, temperature

    def data(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """(the data term, the plain cross-entropy, the other terms by name)."""
        logprobs = token_logprobs(logits)
        ce = cross_entropy(logprobs, targets)
        loss, terms = ce, {}
        if self.label_smoothing:
            loss = (1.0 - self.label_smoothing) * ce - self.label_smoothing * logprobs.mean(-1).mean()
            terms["smoothed_ce"] = loss
        if self.z_loss:
            terms["z_loss"] = self.z_loss * torch.logsumexp(logits.float(), dim=-1).pow(2).mean()
            loss = loss + terms["z_loss"]
        return loss, ce, terms

    def with_teacher(self, out: LMOutput, teacher_logits: torch.Tensor | None, omega: float) -> Losses:
        """The step's losses from a model's output (called with ``data``): the data term, and while ω > 0
        (1 − ω)·it + ω·KD."""
        if omega <= 0:
            return Losses(out.loss, out.ce, out.terms)
        if teacher_logits is None:
            raise ValueError("a KD weight without teacher logits")
        kd = kd_loss(out.logits, teacher_logits, self.temperature)
        return Losses((1.0 - omega) * out.loss + omega * kd, out.ce, {**out.terms, "kd": kd})

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor, teacher_logits: torch.Tensor | None = None,
                 omega: float = 0.0) -> Losses:
        """Both, from logits computed apart."""
        loss, ce, terms = self.data(logits, targets)
        return self.with_teacher(LMOutput(logits, loss, ce, terms), teacher_logits, omega)


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean over tokens of KL(softmax(teacher/ρ) ‖ softmax(student))."""
    teacher_logp = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    student_logp = F.log_softmax(student_logits.float(), dim=-1)
    per_token = (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)
    return per_token.mean()


@torch.no_grad()
def learnable_difficulty(logits: torch.Tensor, targets: torch.Tensor, topk: int) -> torch.Tensor:
    """SALT-DS score per sequence: the median per-token loss over the tokens whose target is in the
    scorer's top-k ("learnable"); sequences with no learnable token score −inf (never picked)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    loss = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    learnable = (logits.topk(topk, dim=-1).indices == targets.unsqueeze(-1)).any(-1)
    masked = torch.where(learnable, loss, torch.tensor(float("nan")))
    score = masked.nanmedian(dim=-1).values
    return torch.nan_to_num(score, nan=float("-inf"))
