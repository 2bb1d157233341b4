"""What a training worker reads: packed sequences as memory maps (the samplers that pick its rows are in
``slm.methods.samplers`` and beside the methods that need their own).

``materialize`` streams a packed Parquet folder (``slm data pack``) into three ``.npy`` files —
tokens (N × (seq_len+1), uint16), coarse and leaf ids, rows in leaf order — once, on the driver,
atomically; every worker
then memory-maps them, so a node holds one page-cache copy whatever its worker count, and a row is a
slice, not a decode. (Ray Data's ``iter_torch_batches`` streams too, but the cluster-aware samplers
need random access by cluster, and exact resume needs the row order to be a function of the step.)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from slm.artifacts import atomic_path, is_complete, read_manifest, remake, verify, write_manifest
from slm.layout import RunLayout, require
from slm.log import logger

log = logger(__name__)

ARRAYS = "arrays"


def materialize(packed_dir: str | Path) -> Path:
    """``<packed_dir>/data/*.parquet`` → ``<packed_dir>/arrays/{tokens,coarse,leaf}.npy`` (skipped when done)."""
    packed_dir = Path(packed_dir).expanduser().resolve()  # workers run elsewhere: absolute paths only
    out = packed_dir / ARRAYS
    files = sorted((packed_dir / "data").glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{packed_dir / 'data'} holds no packed Parquet files: run `slm data pack` first")
    # The packed set against its manifest first, arrays or not: the arrays are what training reads, but a
    # damaged packed set (zeroed Parquet beside intact arrays trained with no word) is refused, naming it.
    verify(packed_dir, remake(packed_dir, "pack"), only=[f"data/{f.name}" for f in files])
    fingerprint = json.dumps([(f.name, f.stat().st_size) for f in files])
    if is_complete(out) and json.loads((out / "manifest.json").read_text()).get("fingerprint") == fingerprint:
        # A run starts here (the driver): the arrays it trains on read in full against their hashes once
        # (workers check the sizes, PackedArrays.open). A zeroed tokens.npy trained 20 steps to exit 0.
        verify(out, f"rm -r {out} (the next run makes it again from {packed_dir / 'data'})")
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
    write_manifest(out, {"stage": "arrays", "rows": rows, "width": width, "fingerprint": fingerprint,
                         "digest": arrays_digest(out)})
    return out


def packed_arrays(layout: RunLayout, name: str) -> Path:
    """The arrays of the run's packed set ``name`` (``RunLayout.packed``), made on first use."""
    return materialize(require(layout.packed(name), "pack"))


def valid_arrays(layout: RunLayout, domains: list[str]) -> dict[str, str]:
    """Each domain's packed valid split as arrays (the ones packed); none packed is said, not an error."""
    out = {d: str(materialize(layout.packed_valid(d))) for d in domains if (layout.packed_valid(d) / "data").exists()}
    if not out:
        log.info(f"[train] no valid split packed under {layout.packed('valid')} "
                 f"(pack.sets without 'valid'): no evaluation")
    return out


def arrays_digest(arrays_dir: str | Path) -> str:
    """SHA-256 (16 hex digits) over the arrays' contents, in their order: what a run trains on, bit for
    bit. Two sweeps whose sets have the same digests trained on the same data (their tables can be
    combined: ``slm report --tables``)."""
    digest = hashlib.sha256()
    for name in ("tokens", "coarse", "leaf"):
        digest.update(np.ascontiguousarray(np.load(Path(arrays_dir) / f"{name}.npy", mmap_mode="r")).tobytes())
    return digest.hexdigest()[:16]


def recorded_digest(arrays_dir: str | Path) -> str:
    """``arrays_digest`` as ``materialize`` recorded it, without reading the arrays again: materialize has
    just checked their bytes against the manifest (``verify``). Computed for arrays made before the digest
    was recorded."""
    manifest = read_manifest(arrays_dir)
    return manifest["digest"] if manifest and "digest" in manifest else arrays_digest(arrays_dir)


@dataclass
class PackedArrays:
    tokens: np.ndarray  # (N, seq_len + 1)
    coarse: np.ndarray  # (N,)
    leaf: np.ndarray  # (N,)

    @classmethod
    def open(cls, arrays_dir: str | Path) -> PackedArrays:
        """The arrays as memory maps, their sizes checked against the manifest (the driver checked their
        bytes when the run started: ``materialize``)."""
        d = Path(arrays_dir)
        verify(d, f"rm -r {d} and rerun (it is made again from the packed Parquet)", hashes=False)
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
