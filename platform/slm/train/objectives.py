"""Losses: next-token cross-entropy, and knowledge distillation with the SALT schedule.

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


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean over tokens of KL(softmax(teacher/ρ) ‖ softmax(student))."""
    teacher_logp = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    student_logp = F.log_softmax(student_logits.float(), dim=-1)
    per_token = (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1)
    return per_token.mean()


def distillation_loss(ce: torch.Tensor, student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      omega: float, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(1 − ω)·CE + ω·KD and the KD term alone."""
    kd = kd_loss(student_logits, teacher_logits, temperature)
    return (1.0 - omega) * ce + omega * kd, kd


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
