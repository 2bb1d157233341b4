"""What a training worker reads: packed sequences as memory maps, and the samplers that pick its rows.

``materialize`` streams a packed Parquet folder (``slm data pack``) into three ``.npy`` files —
tokens (N × (seq_len+1), uint16), coarse and leaf ids, rows in leaf order — once, on the driver,
atomically; every worker
then memory-maps them, so a node holds one page-cache copy whatever its worker count, and a row is a
slice, not a decode. (Ray Data's ``iter_torch_batches`` streams too, but the cluster-aware samplers
need random access by cluster, and exact resume needs the row order to be a function of the step.)

Every sampler is a pure function of (seed, step, rank) plus, for the soup, the prior's generator,
whose state is checkpointed: a resumed run reads exactly the rows an uninterrupted one would.
All ranks of a step share its global choices (the cluster of a mixture step, the h of a soup step),
so the experts that step touches are the same on every rank.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slm.artifacts import atomic_path, is_complete, write_manifest

ARRAYS = "arrays"


def materialize(packed_dir: str | Path) -> Path:
    """``<packed_dir>/data/*.parquet`` → ``<packed_dir>/arrays/{tokens,coarse,leaf}.npy`` (skipped when done)."""
    import pyarrow.parquet as pq

    packed_dir = Path(packed_dir).expanduser().resolve()  # workers run elsewhere: absolute paths only
    out = packed_dir / ARRAYS
    files = sorted((packed_dir / "data").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{packed_dir / 'data'} holds no packed Parquet files: run `slm data pack` first")
    fingerprint = json.dumps([(f.name, f.stat().st_size) for f in files])
    if is_complete(out) and json.loads((out / "manifest.json").read_text()).get("fingerprint") == fingerprint:
        return out
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    if rows == 0:
        raise ValueError(f"{packed_dir}: the packed set has no sequences")
    width = pq.ParquetFile(files[0]).schema_arrow.field("tokens").type.list_size
    dtype = np.uint16 if pq.ParquetFile(files[0]).schema_arrow.field("tokens").type.value_type.bit_width == 16 \
        else np.int32
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "tokens.npy") as t_tmp, atomic_path(out / "coarse.npy") as c_tmp, \
            atomic_path(out / "leaf.npy") as l_tmp:
        tokens = np.lib.format.open_memmap(t_tmp, mode="w+", dtype=dtype, shape=(rows, width))
        coarse = np.lib.format.open_memmap(c_tmp, mode="w+", dtype=np.int32, shape=(rows,))
        leaf = np.lib.format.open_memmap(l_tmp, mode="w+", dtype=np.int32, shape=(rows,))
        # Rows in leaf order, each leaf's rows in the order packing made them: `pack` writes one group per
        # (domain, leaf), and a packed set holds one domain, but it writes them in the order Ray Data's
        # shuffle finishes them, which differed between two runs (issue 16). The samplers draw row indices,
        # so the arrays' order must be a function of the data alone.
        leaves = np.concatenate([pq.read_table(f, columns=["leaf"]).column("leaf").to_numpy() for f in files])
        ids, counts = np.unique(leaves, return_counts=True)
        next_row = dict(zip(ids.tolist(), np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist(), strict=True))
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(columns=["tokens", "coarse", "leaf"], batch_size=4096):
                n = batch.num_rows
                flat = batch.column("tokens").flatten().to_numpy(zero_copy_only=False).reshape(n, width)
                batch_coarse, batch_leaf = batch.column("coarse").to_numpy(), batch.column("leaf").to_numpy()
                for value in np.unique(batch_leaf):
                    mine = batch_leaf == value
                    at, k = next_row[int(value)], int(mine.sum())
                    tokens[at:at + k], coarse[at:at + k], leaf[at:at + k] = flat[mine], batch_coarse[mine], value
                    next_row[int(value)] = at + k
        for a in (tokens, coarse, leaf):
            a.flush()
        del tokens, coarse, leaf
    write_manifest(out, {"stage": "arrays", "rows": rows, "width": width, "fingerprint": fingerprint})
    return out


@dataclass
class PackedArrays:
    tokens: np.ndarray  # (N, seq_len + 1)
    coarse: np.ndarray  # (N,)
    leaf: np.ndarray  # (N,)

    @classmethod
    def open(cls, arrays_dir: str | Path) -> PackedArrays:
        d = Path(arrays_dir)
        return cls(*(np.load(d / f"{name}.npy", mmap_mode="r") for name in ("tokens", "coarse", "leaf")))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1] - 1

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows (sorted reads are faster on a memory map, the order is restored) → (tokens int64, coarse)."""
        order = np.argsort(rows, kind="stable")
        tokens = np.empty((len(rows), self.tokens.shape[1]), dtype=np.int64)
        tokens[order] = self.tokens[rows[order]]
        return tokens, np.asarray(self.coarse[rows], dtype=np.int64)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) for k in key])


class UniformSampler:
    """Epochs of a seeded permutation of ``rows``; step t, rank r take the next world·batch slice."""

    kind = "uniform"

    def __init__(self, rows: np.ndarray, seed: int):
        if len(rows) == 0:
            raise ValueError("the sampler was given no rows")
        self.rows, self.seed = np.asarray(rows), seed
        self._epoch, self._perm = -1, None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._epoch, self._perm = epoch, _rng(self.seed, epoch).permutation(len(self.rows))
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

    kind = "cluster"

    def __init__(self, coarse: np.ndarray, n_clusters: int, seed: int):
        self.seed = seed
        self.members = [np.flatnonzero(coarse == c) for c in range(n_clusters)]
        sizes = np.array([len(m) for m in self.members], dtype=np.float64)
        if sizes.sum() == 0:
            raise ValueError("no sequence carries a coarse cluster id in [0, n_experts)")
        self.p = sizes / sizes.sum()

    def context(self, step: int) -> int:
        return int(_rng(self.seed, step, 1 << 20).choice(len(self.p), p=self.p))

    def indices(self, step: int, rank: int, world: int, batch: int) -> np.ndarray:
        members = self.members[self.context(step)]
        return members[_rng(self.seed, step, rank).integers(0, len(members), batch)]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class MixtureSampler:
    """Soup-of-Experts: each step draws h from the prior (s active domains), then every row picks a
    cluster i ∼ h and a sequence uniformly inside it: the batch is drawn from Σ_i h_i D_i.

    The prior's generator advances one draw per step; its state (and the step it belongs to) is
    checkpointed, so a resumed run draws the same h's."""

    kind = "mixture"

    def __init__(self, coarse: np.ndarray, n_domains: int, active: int, seed: int):
        from slm.models.soup import DomainPrior

        self.seed = seed
        self.members = [np.flatnonzero(coarse == c) for c in range(n_domains)]
        self.prior = DomainPrior(n_domains, active, seed)
        self.present = np.array([len(m) > 0 for m in self.members])
        if not self.present.any():
            raise ValueError("no sequence carries a coarse cluster id in [0, n_domains)")
        self._step, self._h = -1, None

    def context(self, step: int):
        """h for ``step``; steps are drawn in order (the loop asks once per step, resume restores)."""
        import torch

        if step != self._step:
            if step != self._step + 1:
                raise RuntimeError(f"the soup prior is at step {self._step}, asked for {step}: restore its state")
            h = self.prior.sample()
            # Clusters with no packed sequence cannot be drawn from: move their weight to the rest.
            h = h * torch.from_numpy(self.present.astype(np.float32))
            if float(h.sum()) == 0:
                h = torch.from_numpy(self.present / self.present.sum()).float()
            self._step, self._h = step, h / h.sum()
        return self._h

    def indices(self, step: int, rank: int, world: int, batch: int) -> np.ndarray:
        h = self.context(step).numpy().astype(np.float64)
        rng = _rng(self.seed, step, rank)
        clusters = rng.choice(len(h), size=batch, p=h / h.sum())
        return np.array([m[rng.integers(0, len(m))] for m in (self.members[c] for c in clusters)], dtype=np.int64)

    def state_dict(self) -> dict:
        return {"prior": self.prior.state_dict(), "step": self._step,
                "h": None if self._h is None else self._h.tolist()}

    def load_state_dict(self, state: dict) -> None:
        import torch

        self.prior.load_state_dict(state["prior"])
        self._step = state["step"]
        self._h = None if state["h"] is None else torch.tensor(state["h"])
