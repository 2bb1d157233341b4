"""Two editions of a study side by side: each claim and each comparison before and after a change of recipe, which
verdicts change, and why, read from the rows (issue 63: the second edition at lr 1e-2 beside each method at its own
rates).

An edition is its report's ``claims.json`` (``slm report --tables … --out``). Comparisons are matched by claim and
by their condition in words (``Comparison.part``: domain, cell and the methods compared), not by setting names,
which carry the settings that changed (``…-pretrain-lr0.005-specialize-lr0.008``). Why a verdict changed is said
from the rows only:

- a side **moved** when its mean after lies outside its own 95% interval before (the five seeds' spread);
- the **noise changed** when the difference's interval is more than 1.5× wider or narrower than before;
- a comparison in one edition and not the other is listed, never dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from slm.analysis.claims import Comparison

NOISE_RATIO = 1.5  # an interval this many times wider (or narrower) than before is a change of noise


@dataclass(frozen=True)
class SideMove:
    """One side of a comparison (a or b) across the editions."""

    setting_before: str
    setting_after: str
    mean_before: float
    mean_after: float
    ci_before: float  # half its 95% interval over seeds, before

    @property
    def moved(self) -> bool:
        return abs(self.mean_after - self.mean_before) > self.ci_before


@dataclass(frozen=True)
class ComparisonPair:
    claim: str
    part: str
    before: Comparison
    after: Comparison

    @property
    def changed(self) -> bool:
        return self.before.verdict != self.after.verdict

    @property
    def tested(self) -> bool:
        return None not in (self.before.a_mean, self.before.b_mean, self.after.a_mean, self.after.b_mean)

    def side(self, which: str) -> SideMove:
        b, a = self.before, self.after
        return SideMove(getattr(b, which), getattr(a, which), getattr(b, f"{which}_mean"),
                        getattr(a, f"{which}_mean"), getattr(b, f"{which}_ci") or 0.0)

    @property
    def noise_ratio(self) -> float | None:
        """The difference's interval width after ÷ before (None when either is untested or of zero width)."""
        if None in (self.before.low, self.before.high, self.after.low, self.after.high):
            return None
        before = self.before.high - self.before.low
        return (self.after.high - self.after.low) / before if before > 0 else None

    @property
    def why(self) -> str:
        """What in the rows moved, in words: each side that left its interval, and the noise if it changed."""
        if not self.tested:
            return "untested in one edition"
        reasons = []
        for which in ("a", "b"):
            s = self.side(which)
            if s.moved:
                reasons.append(f"{which} moved {s.mean_before:.2f} → {s.mean_after:.2f} (outside ±{s.ci_before:.2f})")
        ratio = self.noise_ratio
        if ratio is not None and (ratio > NOISE_RATIO or ratio < 1 / NOISE_RATIO):
            reasons.append(f"the interval {'widened' if ratio > 1 else 'narrowed'} {ratio:.2f}×")
        return "; ".join(reasons) or "neither side left its interval"


@dataclass(frozen=True)
class ClaimPair:
    id: str
    before: str  # the claim's verdict
    after: str
    comparisons: list[ComparisonPair]
    only_before: list[str]  # comparisons (their parts) one edition has and the other lacks
    only_after: list[str]

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def counts(self, side: str) -> str:
        """``3 / 1 / 8``: the matched comparisons that hold / do not hold / are inconclusive in one edition
        (``side``: ``before`` or ``after``)."""
        verdicts = [getattr(c, side).verdict for c in self.comparisons]
        return " / ".join(str(verdicts.count(v)) for v in ("holds", "does not hold", "inconclusive"))


def read_claims(report: Path) -> list[dict]:
    """A report folder's claims (``report/claims.json``), or a clear error naming the file."""
    path = report / "report" / "claims.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no claims (is {report} a folder written by `slm report --out`?)")
    return json.loads(path.read_text())


def side_by_side(before: list[dict], after: list[dict]) -> list[ClaimPair]:
    """Every claim of either edition, its comparisons matched by their condition."""
    after_by_id = {c["id"]: c for c in after}
    before_ids = [c["id"] for c in before]
    pairs = []
    for claim in before + [c for c in after if c["id"] not in before_ids]:
        other = after_by_id.get(claim["id"])
        old = {c["part"]: Comparison(**c) for c in (claim["comparisons"] if claim["id"] in before_ids else [])}
        new = {c["part"]: Comparison(**c) for c in (other["comparisons"] if other else [])}
        pairs.append(ClaimPair(
            claim["id"],
            claim["verdict"] if claim["id"] in before_ids else "—",
            other["verdict"] if other else "—",
            [ComparisonPair(claim["id"], part, old[part], new[part]) for part in old if part in new],
            [p for p in old if p not in new], [p for p in new if p not in old]))
    return pairs


def markdown(pairs: list[ClaimPair], before: str, after: str) -> str:
    """The claims and every comparison side by side, changed verdicts in bold, with why."""
    out = [f"| claim | {before} | {after} | changed |", "|---|---|---|---|"]
    out += [f"| {p.id} | {p.before} | {p.after} | {'**yes**' if p.changed else 'no'} |" for p in pairs]
    out += ["", f"| claim | comparison | {before} | {after} | b − a, {before} | b − a, {after} | why |",
            "|---|---|---|---|---|---|---|"]
    for p in pairs:
        for c in p.comparisons:
            mark = "**" if c.changed else ""
            out.append(f"| {p.id} | {c.part} | {mark}{c.before.verdict}{mark} | {mark}{c.after.verdict}{mark} | "
                       f"{_interval(c.before)} | {_interval(c.after)} | {c.why} |")
        out += [f"| {p.id} | {part} | (only in {before}) | | | | |" for part in p.only_before]
        out += [f"| {p.id} | {part} | | (only in {after}) | | | |" for part in p.only_after]
    return "\n".join(out) + "\n"


def write_side_by_side(before: Path, after: Path) -> Path:
    """``after/report/side_by_side.md`` (``slm report --beside``): the two editions' claims and comparisons side by
    side."""
    from slm.artifacts import atomic_write_text

    out = after / "report" / "side_by_side.md"
    atomic_write_text(out, f"# {before} beside {after}\n\n" + markdown(
        side_by_side(read_claims(before), read_claims(after)), before.name, after.name))
    return out


def _interval(c: Comparison) -> str:
    if c.low is None:
        return c.test
    return f"{c.difference:+.2f} [{c.low:+.2f}, {c.high:+.2f}]"
