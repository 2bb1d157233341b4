"""`histogram`: each specialist domain's distribution over the cluster leaves, smoothed, with its entropy.

Counts come from the cluster assignments (the domain's train windows were embedded and assigned with the
generic ones). Smoothing is additive over the K leaves that hold generic windows:

    P(c | D) = (n_c(D) + α) / (N(D) + α·K)        (α = histogram.alpha, 0.5 by default)

so an empty bin keeps a little mass and importance weights stay finite; leaves with no generic windows
get no mass at all (nothing could be drawn from them) and the domain mass that fell there is reported as
``unsupported_mass``. The generic histogram P(c | D_g) uses the same rule, so w(c) = P(c|D_s)/P(c|D_g)
is the SLM-is importance weight.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from slm.artifacts import atomic_write_json, remake, verify
from slm.data.cluster import load_sizes
from slm.log import logger

log = logger(__name__)

GENERIC = "generic"


def counts_by_leaf(sizes: list[dict], domain: str, leaves: int, what: str = "windows") -> np.ndarray:
    counts = np.zeros(leaves, dtype=np.float64)
    for row in sizes:
        if row["domain"] == domain:
            counts[row["leaf"]] += row[what]
    return counts


def smoothed(counts: np.ndarray, support: np.ndarray, alpha: float) -> np.ndarray:
    p = np.where(support, counts + alpha, 0.0)
    total = p.sum()
    if total <= 0:
        raise ValueError("no mass on any leaf with generic windows")
    return p / total


def entropy(p: np.ndarray) -> float:
    q = p[p > 0]
    return float(-(q * np.log(q)).sum())


def kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p ‖ q) in nats; +inf where p has mass that q lacks."""
    mask = p > 0
    if np.any(q[mask] <= 0):
        return math.inf
    return float((p[mask] * np.log(p[mask] / q[mask])).sum())


def domain_histograms(cluster_dir: str | Path, alpha: float, domains: list[str] | None = None) -> dict:
    verify(cluster_dir, remake(cluster_dir, "cluster"))  # the assignments the histograms and resampling read
    info = json.loads((Path(cluster_dir) / "clusters.json").read_text())
    sizes, leaves = load_sizes(cluster_dir), info["leaves"]
    generic = counts_by_leaf(sizes, GENERIC, leaves)
    if generic.sum() == 0:
        raise ValueError(f"{cluster_dir}: the assignments hold no generic windows")
    support = generic > 0
    present = sorted({r["domain"] for r in sizes} - {GENERIC})
    wanted = domains or present
    p_generic = smoothed(generic, support, alpha)
    out = {"leaves": leaves, "alpha": alpha, "generic": {
        "windows": int(generic.sum()), "p": p_generic.tolist(), "entropy": entropy(p_generic)}, "domains": {}}
    for domain in wanted:
        counts = counts_by_leaf(sizes, domain, leaves)
        if counts.sum() == 0:
            raise ValueError(f"domain {domain!r} has no windows in {cluster_dir} (domains there: {present}); "
                             "embed its train split and re-run cluster")
        unsupported = float(counts[~support].sum() / counts.sum())
        if unsupported >= 1.0:
            raise ValueError(f"domain {domain!r}: all of its windows fall in leaves that hold no generic "
                             "windows; nothing generic can be drawn for it (re-cluster with more generic data)")
        p = smoothed(counts, support, alpha)
        out["domains"][domain] = {
            "windows": int(counts.sum()), "p": p.tolist(), "raw_counts": counts.astype(int).tolist(),
            "entropy": entropy(p), "unsupported_mass": unsupported,
            "kl_to_generic": kl(p, p_generic),
        }
    return out


def write_histograms(cluster_dir: str | Path, alpha: float, out: Path, domains: list[str] | None = None) -> dict:
    result = domain_histograms(cluster_dir, alpha, domains)
    atomic_write_json(out / "histograms.json", result)
    for domain, h in result["domains"].items():
        log.info(f"[histogram] {domain}: {h['windows']} windows, entropy over the {len(h['p'])} fine leaves "
                 f"{h['entropy']:.2f} nats, "
                 f"KL to generic {h['kl_to_generic']:.2f}")
    return result


def coarse_histograms(clusters_json: Path, histograms_json: Path) -> dict[str, list[float]]:
    """Each domain's smoothed leaf histogram summed into its coarse clusters, normalized: what SLM-mix,
    SLM-pn and the soup serve a domain by. Leaves are numbered coarse·fine_k + j (``slm.data.cluster``)."""
    info = json.loads(clusters_json.read_text())
    hist = json.loads(histograms_json.read_text())
    per_coarse = max(1, info["fine_k"])
    out = {}
    for domain, h in hist["domains"].items():
        p = np.asarray(h["p"], dtype=np.float64)
        out[domain] = (p.reshape(info["k"], per_coarse).sum(1) / p.sum()).tolist()
    return out
