"""The samplers that pick a training step's rows: pure functions of (seed, step, rank).

A resumed run reads exactly the rows an uninterrupted one would. All ranks of a step share its global
choices (the cluster of a mixture step), so the experts that step touches are the same on every rank.
A method that needs another sampler defines it beside itself (the soup's, in ``slm.methods.soup``);
each implements ``indices(step, rank, world, batch)``, ``context(step)`` (what the method's forward
needs of the step besides its rows: None, a cluster id, the soup's h) and ``state_dict`` /
``load_state_dict`` for what a checkpoint must carry.
"""

from __future__ import annotations

import numpy as np


def step_rng(*key: int) -> np.random.Generator:
    """A generator keyed by integers (seed, step, rank, …): the same stream wherever it is made."""
    return np.random.default_rng([int(k) for k in key])


class UniformSampler:
    """Epochs of a seeded permutation of ``rows``; step t, rank r take the next world·batch slice."""

    def __init__(self, rows: np.ndarray, seed: int):
        if len(rows) == 0:
            raise ValueError("the sampler was given no rows")
        self.rows, self.seed = np.asarray(rows), seed
        self._epoch, self._perm = -1, None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, step_rng(self.seed, epoch).permutation(len(self.rows))
        return self._perm

    def indices(self, step: int, rank: int, world: int, batch: int) -> np.ndarray:
        start = (step * world + rank) * batch
        positions = np.arange(start, start + batch)
        out = np.empty(batch, dtype=np.int64)
        for epoch in np.unique(positions // len(self.rows)):
            mask = positions // len(self.rows) == epoch
            out[mask] = self.rows[self._permutation(int(epoch))[positions[mask] % len(self.rows)]]
        return out

    def context(self, step: int):
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class ClusterSampler:
    """SLM-mix / SLM-pn: each step draws one coarse cluster (∝ its size, so every sequence is as likely
    as under uniform sampling), and every rank's batch comes from it: one expert per step."""

    def __init__(self, coarse: np.ndarray, n_clusters: int, seed: int):
        self.seed = seed
        self.members = [np.flatnonzero(coarse == c) for c in range(n_clusters)]
        sizes = np.array([len(m) for m in self.members], dtype=np.float64)
        if sizes.sum() == 0:
            raise ValueError("no sequence carries a coarse cluster id in [0, n_experts)")
        self.p = sizes / sizes.sum()

    def context(self, step: int) -> int:
        return int(step_rng(self.seed, step, 1 << 20).choice(len(self.p), p=self.p))

    def indices(self, step: int, rank: int, world: int, batch: int) -> np.ndarray:
        members = self.members[self.context(step)]
        return members[step_rng(self.seed, step, rank).integers(0, len(members), batch)]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
