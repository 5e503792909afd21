"""Our samplers against the server's: a next-token distribution as the server lists it, a sampler chain
applied to it in numpy (`sampling.apply_chain`), and the comparison with the probabilities the server
keeps after the same chain (its post-sampling probabilities). Lesson 5 asks; this module computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bytesup.course.sampling import IncompleteDistribution, apply_chain, kept_indices


@dataclass(frozen=True)
class SamplerSetting:
    """A sampler chain: its label, the server's `samplers` order and their settings."""
    label: str
    samplers: tuple[str, ...]
    params: dict[str, float]

    @property
    def chain(self) -> str:
        return " → ".join(self.samplers)

    def steps(self) -> list[tuple[str, float]]:
        return [(name, self.params[name]) for name in self.samplers]


@dataclass(frozen=True)
class Distribution:
    """The listed candidates of the full softmax, most probable first."""
    ids: list[int]
    probs: np.ndarray
    texts: list[str]
    asked: list[int]                  # n_probs of each reference request
    n_vocab: int | None

    @property
    def complete(self) -> bool:
        """The whole vocabulary is listed."""
        return self.n_vocab is not None and len(self.ids) >= self.n_vocab

    @property
    def total(self) -> float | None:
        """The whole distribution's mass for the samplers: None when it is all listed, else 1."""
        return None if self.complete else 1.0

    @property
    def listed_mass(self) -> float:
        return float(self.probs.sum())


def needs_more(probs: list[float], settings: list[SamplerSetting]) -> bool:
    """Whether some chain that cuts (not temperature alone) keeps tokens beyond the listed candidates."""
    for s in settings:
        if s.samplers == ("temperature",):
            continue
        try:
            apply_chain(probs, s.steps(), total=1.0)
        except IncompleteDistribution:
            return True
    return False


@dataclass(frozen=True)
class Applied:
    """A sampler chain applied in numpy to the listed candidates (ours None: not exactly computable)."""
    setting: SamplerSetting
    ours: np.ndarray | None
    kept: list[int] = field(default_factory=list)   # candidate positions kept, most probable first
    probs_kept: float = 0.0                          # original probability of the kept candidates
    top_before: float | None = None                  # the most probable kept token's probability, before
    top_after: float | None = None                   # and after the chain
    top_token: str | None = None

    @property
    def kept_percent(self) -> float | None:
        return None if self.ours is None else 100 * float(self.probs_kept)


def apply_setting(dist: Distribution, setting: SamplerSetting) -> Applied:
    try:
        ours = apply_chain(dist.probs, setting.steps(), total=dist.total)
    except IncompleteDistribution:
        return Applied(setting, None)
    kept = [int(i) for i in kept_indices(ours)]
    top = kept[0]
    return Applied(setting, ours, kept, probs_kept=float(dist.probs[kept].sum()), top_before=float(dist.probs[top]),
                   top_after=float(ours[top]), top_token=dist.texts[top])


def comparison_target(dist: Distribution, a: Applied) -> tuple[np.ndarray | None, bool]:
    """Our probabilities to compare with the server's, and whether relatively: temperature alone on a
    partial list keeps every token, so its normalizer is unknown and only ratios can be compared."""
    if a.ours is None and a.setting.samplers == ("temperature",):
        return apply_chain(dist.probs, a.setting.steps()), True
    return a.ours, False


def asked_candidates(dist: Distribution, a: Applied, at_most: int) -> int | None:
    """n_probs of the post-sampling request: one more than we keep, so a shorter list is the server's whole
    kept set (at most `at_most`); None when the setting cannot be checked."""
    ours, relative = comparison_target(dist, a)
    if ours is None:
        return None
    return min(at_most, len(dist.ids)) if relative else min(int(np.count_nonzero(ours)) + 1, at_most)


@dataclass(frozen=True)
class Comparison:
    """Our kept probabilities against the server's listed ones."""
    kept_ours: int | None             # None in relative mode
    kept_server: int | None           # None when the server's list was cut at n_probs
    listed: int
    server_listed_all: bool
    same_set: bool
    max_abs: float
    max_rel: float
    sampled_in_kept: bool
    agree: bool


def compare_with_server(ref_ids: list[int], ours: np.ndarray, server: list[tuple[int, float]],
                        n_asked: int, sampled_id: int, rel_tol: float, relative: bool = False) -> Comparison:
    """Our kept probabilities (aligned with ref_ids) against the server's listed (id, p).

    The server lists its kept candidates, most probable first, at most `n_asked` of them: if it
    lists fewer, that is its whole kept set. `relative`: both sides are renormalized over the
    listed tokens first (for a temperature-only chain on a partial reference list).
    """
    pos = {tid: i for i, tid in enumerate(ref_ids)}
    kept_ids = [ref_ids[i] for i in kept_indices(ours)]
    listed = [tid for tid, _ in server]
    complete = len(server) < n_asked
    missing = [tid for tid in listed if tid not in pos or ours[pos[tid]] <= 0]
    ours_p = np.array([ours[pos[tid]] if tid in pos else 0.0 for tid in listed])
    q = np.array([p for _, p in server])
    if relative and ours_p.sum() > 0:
        ours_p, q = ours_p / ours_p.sum(), q / q.sum()
    delta = np.abs(ours_p - q)
    rel = delta / np.where(q > 0, q, np.inf)
    same = (set(listed) == set(kept_ids)) if complete else (set(listed) == set(kept_ids[:len(listed)]))
    same = bool(same and not missing)
    max_rel = float(rel.max()) if rel.size else math.nan
    # relative mode knows only part of the reference, so a drawn token outside it is not a miss
    drawn_ok = sampled_id in set(kept_ids) or (relative and sampled_id not in pos)
    return Comparison(kept_ours=None if relative else len(kept_ids), kept_server=len(listed) if complete else None,
                      listed=len(listed), server_listed_all=complete, same_set=same,
                      max_abs=float(delta.max()) if delta.size else math.nan, max_rel=max_rel,
                      sampled_in_kept=drawn_ok, agree=same and drawn_ok and max_rel <= rel_tol)


@dataclass(frozen=True)
class SamplerCheck:
    """One setting checked against the server (cmp None: not checked)."""
    setting: SamplerSetting
    tolerance: float                  # |Δp| / p allowed
    cmp: Comparison | None = None
    relative: bool = False
    drawn: str | None = None          # the token the server drew
    edge: float | None = None         # our smallest kept probability (where the server listed part of the set)

    @property
    def verdict(self) -> str:
        if self.cmp is None:
            return "not checked"
        return ("agree" if self.cmp.agree else "mismatch") + (" (relative)" if self.relative else "")

    def fact(self) -> dict[str, str | float | bool | None]:
        c = self.cmp
        rel = None if c is None or math.isnan(c.max_rel) else c.max_rel
        return {"name": self.setting.label, "max_relative_difference": rel, "tolerance": self.tolerance,
                "same_tokens": None if c is None else c.same_set}


@dataclass(frozen=True)
class ServerAnswer:
    """The server's answer to one chain: its listed (id, p) after the chain and the token it drew."""
    listed: list[tuple[int, float]]
    drawn_id: int
    drawn: str


def check_setting(dist: Distribution, a: Applied, answer: ServerAnswer | None, tolerance: float, at_most: int) -> SamplerCheck:
    """Our chain against the server's answer to the same chain (answer None: not asked); `at_most` is the most
    candidates the request may ask for."""
    ours, relative = comparison_target(dist, a)
    if ours is None or answer is None:
        return SamplerCheck(a.setting, tolerance)
    n_ask = asked_candidates(dist, a, at_most)
    assert n_ask is not None
    cmp = compare_with_server(dist.ids, ours, answer.listed, n_ask, answer.drawn_id, tolerance, relative=relative)
    partial = cmp.kept_server is None and cmp.kept_ours is not None and cmp.kept_ours > 1
    edge = float(np.min(a.ours[a.ours > 0])) if partial and a.ours is not None else None
    return SamplerCheck(a.setting, tolerance, cmp, relative, answer.drawn, edge)


@dataclass(frozen=True)
class CheckSummary:
    """What the checks of every setting add up to."""
    checks: list[SamplerCheck]

    @property
    def checked(self) -> list[SamplerCheck]:
        return [c for c in self.checks if c.cmp is not None]

    @property
    def agree(self) -> list[SamplerCheck]:
        return [c for c in self.checked if c.verdict.startswith("agree")]

    @property
    def mismatch(self) -> list[SamplerCheck]:
        return [c for c in self.checked if c.verdict.startswith("mismatch")]

    @property
    def edges(self) -> list[float]:
        return [c.edge for c in self.checked if c.edge is not None]

    @property
    def largest_relative(self) -> float:
        """The largest |Δp| / p of any setting checked (NaN when none was)."""
        return max(c.cmp.max_rel for c in self.checked if c.cmp is not None) if self.checked else math.nan
