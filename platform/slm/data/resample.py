"""`resample --domain D --tokens N --method crisp|dsir|uniform`: a generic subset aimed at domain D.

- **crisp** (SLM-is / CRISP): draw a leaf c ~ P(c | D) (the smoothed domain histogram), then a generic
  window uniformly inside c. Done as Poisson sampling, the distributed form of those multinomial draws:
  leaf c needs m_c = N·P(c|D) / (mean tokens of its windows) draws, so each of its n_c generic windows is
  kept k ~ Poisson(m_c / n_c) times (k ≥ 2: repeated, as draws with replacement are). The seed and the
  window id fix each k, so a rerun draws the same subset.
- **uniform**: the control; every generic window kept Poisson(N / generic tokens) times.
- **dsir**: hashed n-gram importance resampling (``slm.data.dsir``), without replacement.

Output (``<run>/resampled/<domain>/<method>/``): Parquet rows (window id, doc id, source, text, n_tokens,
coarse, leaf, copy), and a manifest with the per-leaf weights w(c) = P(c|D)/P(c|D_g), the tokens drawn and
KL(resampled leaf histogram ‖ domain histogram).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slm.artifacts import atomic_path, write_manifest
from slm.corpus.documents import hash_seed
from slm.data import dsir
from slm.data.histogram import GENERIC, counts_by_leaf, kl, smoothed

METHODS = ("crisp", "uniform", "dsir")
ROWS_PER_BLOCK = 4096


def _poisson_copies(batch: pa.Table, lam: np.ndarray, seed: int) -> pa.Table:
    ids = batch.column("id").to_pylist()
    leaves = batch.column("leaf").to_numpy()
    # One generator per row, seeded by (seed, id): the draw does not depend on blocks or workers.
    k = np.array([np.random.default_rng(hash_seed(f"resample:{seed}:{i}")).poisson(lam[leaf])
                  for i, leaf in zip(ids, leaves, strict=True)], dtype=np.int64)
    rows = np.repeat(np.arange(len(ids)), k)
    out = batch.take(pa.array(rows, pa.int64()))
    copy = np.concatenate([np.arange(c) for c in k]) if len(k) else np.zeros(0, np.int64)
    return out.append_column("copy", pa.array(copy.astype(np.int32)))


def resample(cluster_dir: str | Path, histograms: dict, domain: str, tokens: int, method: str, out: Path,
             seed: int = 0) -> dict:
    import ray.data
    from ray.data.expressions import col

    if method not in METHODS:
        raise ValueError(f"resample method must be one of {METHODS}, got {method!r}")
    if tokens <= 0:
        raise ValueError(f"resample tokens must be positive, got {tokens}")
    if domain not in histograms["domains"]:
        raise ValueError(f"no histogram for domain {domain!r} (have {sorted(histograms['domains'])})")
    from slm.data.cluster import load_sizes

    started = time.perf_counter()
    sizes = load_sizes(cluster_dir)
    leaves = histograms["leaves"]
    n_c = counts_by_leaf(sizes, GENERIC, leaves)
    t_c = counts_by_leaf(sizes, GENERIC, leaves, "tokens")
    p_domain = np.array(histograms["domains"][domain]["p"])
    p_generic = np.array(histograms["generic"]["p"])
    weights = np.divide(p_domain, p_generic, out=np.zeros_like(p_domain), where=p_generic > 0)
    assignments = ray.data.read_parquet(str(Path(cluster_dir) / "assignments"))

    def windows_of(d: str):
        # Ray 2.60 reads small files as a few large blocks: cut them as they stream by, so that the
        # per-window work (Poisson draws, DSIR's n-gram hashing) runs on every CPU.
        return assignments.filter(expr=col("domain") == d).repartition(target_num_rows_per_block=ROWS_PER_BLOCK)

    generic = windows_of(GENERIC)
    info: dict = {}
    if method in ("crisp", "uniform"):
        mean_tokens = np.divide(t_c, n_c, out=np.zeros_like(t_c), where=n_c > 0)
        if method == "crisp":
            draws = np.divide(tokens * p_domain, mean_tokens, out=np.zeros_like(p_domain), where=mean_tokens > 0)
            lam = np.divide(draws, n_c, out=np.zeros_like(draws), where=n_c > 0)
        else:
            lam = np.where(n_c > 0, tokens / t_c.sum(), 0.0)
        info["expected_tokens"] = float((lam * t_c).sum())
        info["mean_copies_per_window"] = {"max": float(lam.max()), "mean_over_used_leaves": float(lam[lam > 0].mean())}
        chosen = generic.map_batches(_poisson_copies, fn_kwargs={"lam": lam, "seed": seed}, batch_format="pyarrow")
    else:
        target = windows_of(domain)
        chosen, log_diff, threshold = dsir.select(generic, target, tokens, seed)
        chosen = chosen.map_batches(lambda b: b.append_column("copy", pa.array(np.zeros(b.num_rows, np.int32))),
                                    batch_format="pyarrow").drop_columns(["key"])
        info["key_threshold"] = threshold
    with atomic_path(out / "data") as tmp:
        chosen.write_parquet(str(tmp))
    # The drawn leaf histogram: one small count vector per block, summed here (no shuffle: a groupby
    # would start Ray Data's aggregator actors, seconds of fixed cost for a few thousand numbers).
    drawn = ray.data.read_parquet(str(out / "data")).select_columns(["leaf", "n_tokens"])
    parts = drawn.map_batches(_leaf_counts, fn_kwargs={"leaves": leaves}, batch_format="pyarrow").take_all()
    drawn_windows = np.sum([np.asarray(p["windows"]) for p in parts], axis=0) if parts else np.zeros(leaves)
    drawn_tokens = int(sum(p["tokens"] for p in parts))
    if drawn_windows.sum() == 0:
        raise ValueError(f"resample {method} for {domain!r} drew nothing (tokens={tokens})")
    p_drawn = drawn_windows / drawn_windows.sum()
    support = n_c > 0
    manifest = write_manifest(out, {
        "stage": "resample", "domain": domain, "method": method, "seed": seed,
        "tokens_target": tokens, "tokens_drawn": drawn_tokens, "windows_drawn": int(drawn_windows.sum()),
        "weights": {"w_c": weights.tolist(), "p_domain": p_domain.tolist(), "p_generic": p_generic.tolist()},
        "kl_resampled_to_domain": kl(p_drawn, p_domain),
        "kl_domain_to_resampled_smoothed": kl(p_domain, smoothed(drawn_windows, support, histograms["alpha"])),
        **info, "seconds": round(time.perf_counter() - started, 1),
    })
    print(f"[resample] {domain}/{method}: {drawn_tokens} tokens in {int(drawn_windows.sum())} windows, "
          f"KL(resampled ‖ domain) = {manifest['kl_resampled_to_domain']:.3f}", flush=True)
    return manifest


def _leaf_counts(batch: pa.Table, leaves: int) -> pa.Table:
    counts = np.bincount(batch.column("leaf").to_numpy(), minlength=leaves)
    return pa.table({"windows": pa.FixedSizeListArray.from_arrays(counts, leaves),
                     "tokens": [int(pc.sum(batch.column("n_tokens")).as_py() or 0)]})
