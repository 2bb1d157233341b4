"""The samplers' contracts: exact resume, ranks that agree on a step's cluster or h, epochs without
repeats. Pure functions of (seed, step, rank) plus checkpointed state; no Ray needed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from slm.methods.samplers import ClusterSampler, UniformSampler
from slm.methods.soup import MixtureSampler
from slm.train.config import OptimConfig
from slm.train.strategies import lr_lambda


def test_uniform_sampler_covers_each_epoch_once_across_ranks():
    rows = np.arange(100, 197)  # 97 rows: epochs do not align with batches
    s = UniformSampler(rows, seed=3)
    seen = np.concatenate([s.indices(step, rank, 2, 4) for step in range(13) for rank in range(2)])
    assert sorted(seen[:97].tolist()) == rows.tolist()  # the first 97 draws are one permutation
    again = UniformSampler(rows, seed=3)  # a fresh sampler (a resumed worker) draws the same rows
    assert np.array_equal(again.indices(7, 1, 2, 4), s.indices(7, 1, 2, 4))


def test_cluster_sampler_gives_every_rank_the_same_cluster():
    coarse = np.repeat(np.arange(4), [50, 30, 0, 20])
    s = ClusterSampler(coarse, 4, seed=1)
    for step in range(30):
        clusters = {int(c) for rank in range(3) for c in coarse[s.indices(step, rank, 3, 8)]}
        assert clusters == {s.context(step)} and s.context(step) != 2  # never the empty cluster
    drawn = np.bincount([s.context(t) for t in range(3000)], minlength=4) / 3000
    np.testing.assert_allclose(drawn, [0.5, 0.3, 0.0, 0.2], atol=0.03)  # ∝ cluster size


def test_mixture_sampler_resumes_the_same_h_sequence():
    coarse = np.repeat(np.arange(6), 10)
    coarse[coarse == 5] = 4  # cluster 5 holds nothing: its weight moves to the others
    run = MixtureSampler(coarse, 6, active=2, seed=0)
    hs = [run.context(t).clone() for t in range(10)]
    assert all(abs(float(h.sum()) - 1) < 1e-6 and float(h[5]) == 0 for h in hs)
    assert all(int((h > 0).sum()) <= 2 for h in hs)
    resumed = MixtureSampler(coarse, 6, active=2, seed=0)
    partial = MixtureSampler(coarse, 6, active=2, seed=0)
    for t in range(5):
        partial.context(t)
    resumed.load_state_dict(partial.state_dict())
    for t in range(5, 10):
        assert torch.equal(resumed.context(t), hs[t])
    # rows come from the active clusters only
    rows = resumed.indices(9, 0, 1, 64)
    assert set(coarse[rows].tolist()) <= set(torch.nonzero(hs[9]).flatten().tolist())
    with pytest.raises(RuntimeError, match="restore"):
        MixtureSampler(coarse, 6, 2, 0).context(7)  # skipping steps would silently change the stream


def test_lr_schedule_warmup_then_cosine():
    f = lr_lambda(OptimConfig(warmup_steps=10, min_lr_ratio=0.1), budget_steps=110)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.55) and f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)
    assert lr_lambda(OptimConfig(warmup_steps=10), budget_steps=None)(1000) == 1.0  # a wall-clock budget


def test_training_arrays_do_not_depend_on_the_order_packing_wrote_its_groups(tmp_path):
    """Packing writes one group of sequences per leaf, in the order Ray Data's shuffle finishes them; the
    arrays the samplers index are in leaf order whatever that order was (issue 16)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from slm.artifacts import write_manifest
    from slm.train.data import PackedArrays, materialize

    rng = np.random.default_rng(0)
    groups = {leaf: rng.integers(0, 1000, size=(n, 5), dtype=np.uint16) for leaf, n in ((3, 4), (0, 6), (7, 2))}

    def packed(order: list[int], name: str):
        folder = tmp_path / name
        (folder / "data").mkdir(parents=True)
        for i, leaf in enumerate(order):  # one file per group, named in write order
            g = groups[leaf]
            pq.write_table(pa.table({"tokens": pa.FixedSizeListArray.from_arrays(pa.array(g.reshape(-1)), 5),
                                     "coarse": pa.array([leaf // 2] * len(g), pa.int32()),
                                     "leaf": pa.array([leaf] * len(g), pa.int32())}), folder / "data" / f"part-{i}.parquet")
        write_manifest(folder, {"stage": "pack"})  # as the pack stage records what it wrote
        return PackedArrays.open(materialize(folder))

    a, b = packed([3, 0, 7], "a"), packed([7, 3, 0], "b")
    assert np.array_equal(a.leaf, [0] * 6 + [3] * 4 + [7] * 2) and np.array_equal(a.leaf, b.leaf)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.coarse, b.coarse)
    assert np.array_equal(a.tokens[:6], groups[0]) and np.array_equal(a.tokens[10:], groups[7])
