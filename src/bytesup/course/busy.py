"""Whether the machine was busy while a lesson measured: one rule over the readings a run takes around every lesson.

A run reads the machine before and after each lesson and between a lesson's turns (`bytesup.host.load`), and records
the readings as the lesson's host value `machine_load`:

    {"cores": 2, "server_threads": 2,
     "load_average": [{"at": "before", "load1": 0.4}, ...],      # the 1-minute load average at each reading
     "cpu": {"seconds": 30.0, "foreign_share": 0.05} | None,     # over the whole lesson; None: not available here
     "stretches": [{"at": "turn 3", "seconds": 6.0, "foreign_share": 0.1}, ...],
     "drift": {"change": -0.4, "ranges_overlap": False},          # where the lesson took the run's second reading
     "pace": {"before": [151.2, 149.8, 150.3], "after": [...]},   # the run's pace readings around it, tokens/s
                                                                  # (bytesup.run.pace: not part of the rule)
     "collapsed": [{"measurement": ..., "unit": ..., "first": ..., "last": ...}]}

`foreign_share` is the CPU time other processes used (all but the run and its servers) over the cores' time. The rule
(`RULE`, `judge`): the machine was busy when

- other processes used more than FOREIGN_SHARE of the cores' time over the lesson, or over any stretch of at least
  MIN_STRETCH_S seconds between its turns;
- or the 1-minute load average, less the run's own share (the server's threads and one for the run itself),
  exceeded the cores the server leaves free plus LOAD_MARGIN;
- or the run's memory bandwidth moved by more than DRIFT between its two readings, beyond both readings' ranges;
- or a timing's samples collapsed against its own first ones: the median of its last samples below COLLAPSE × the
  median of its first ones for a speed, or above 1 ÷ COLLAPSE × it for a time.

Pure arithmetic on plain data: no reading of the machine here.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

HOST_VALUE = "machine_load"   # the lesson's host value holding its readings
FOREIGN_SHARE = 0.25          # of the cores' time, used by other processes
MIN_STRETCH_S = 5.0           # a stretch between turns shorter than this is too short to judge
LOAD_MARGIN = 0.5             # runnable threads beyond the cores the server leaves free
DRIFT = 0.25                  # the bandwidth's change between the run's two readings
COLLAPSE = 0.5                # the last samples' speed against the first ones'
MIN_COLLAPSE_SAMPLES = 4      # fewer samples cannot tell a collapse from scatter
TIME_UNITS = frozenset({"s", "ms", "µs", "us", "ns"})

RULE = (f"the machine counts as busy when other processes used more than {FOREIGN_SHARE:.0%} of the cores' time "
        f"over the lesson or over any stretch of at least {MIN_STRETCH_S:g} s between its turns; or the 1-minute load "
        "average, less the run's own share (the server's threads and one for the run), exceeded the cores the server "
        f"leaves free plus {LOAD_MARGIN:g}; or the run's memory bandwidth moved by more than {DRIFT:.0%} between its "
        "two readings, beyond both readings' ranges; or a timing's last samples' median fell below "
        f"{COLLAPSE:g} × its first samples' median (a speed) or rose above {1 / COLLAPSE:g} × it (a time)")


@dataclass(frozen=True)
class Verdict:
    """The rule's answer: busy or not, the reasons (one phrase per signal that tripped), and the load in words."""

    busy: bool
    reasons: tuple[str, ...]
    load: str   # "load average 6.1 on 2 cores" (the highest reading), or that the figure is not available
    highest_load: float | None = None   # that reading; None where not available

    def sentence(self) -> str:
        """"the machine was busy: …" or "the machine was not busy by the run's readings (…)"."""
        if self.busy:
            return "the machine was busy: " + "; ".join(self.reasons)
        return f"the machine was not busy by the run's readings ({self.load})"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def own_share(server_threads: int) -> float:
    """The runnable threads the run itself may account for: its server's threads and one for the run's process."""
    return max(0, server_threads) + 1.0


def load_limit(cores: int, server_threads: int) -> float:
    """The 1-minute load average above which other processes compete for the cores: the run's own share, plus the
    cores the server leaves free, plus LOAD_MARGIN."""
    return own_share(server_threads) + max(0, cores - server_threads) + LOAD_MARGIN


def collapse(samples: list[float], higher_is_better: bool) -> tuple[float, float] | None:
    """(first, last): the medians of a timing's first and last samples (a third of them each, at least two) when they
    collapsed by the rule (a speed's last median below COLLAPSE × its first, a time's above 1 ÷ COLLAPSE × it), else
    None; None too for fewer than MIN_COLLAPSE_SAMPLES samples."""
    values = [float(s) for s in samples if _num(s) is not None]
    if len(values) < MIN_COLLAPSE_SAMPLES:
        return None
    k = max(2, len(values) // 3)
    first, last = statistics.median(values[:k]), statistics.median(values[-k:])
    if first <= 0 or last <= 0:
        return None
    fell = last < COLLAPSE * first if higher_is_better else last > first / COLLAPSE
    return (first, last) if fell else None


def is_timing(unit: str) -> bool:
    """A speed (a unit per second) or a time: the measurements whose samples a busy machine drags."""
    u = unit.strip()
    return u.endswith("/s") or u in TIME_UNITS


def collapses(measurements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timings among `measurements` (dicts with name, unit, samples, higher_is_better, settings) whose samples
    collapsed against their own first ones (`collapse`), in their order."""
    found = []
    for m in measurements:
        better = m.get("higher_is_better")
        if not isinstance(better, bool) or not is_timing(str(m.get("unit", ""))):
            continue
        fell = collapse(list(m.get("samples") or []), better)
        if fell is not None:
            found.append({"measurement": m.get("name"), "settings": m.get("settings") or {}, "unit": m.get("unit"),
                          "first": fell[0], "last": fell[1]})
    return found


def pace_samples(pace: Any, at: str) -> list[float]:
    """The positive tokens/s samples of one pace reading ("before" or "after") of a lesson's `pace` record, [] where
    there is none."""
    values = pace.get(at) if isinstance(pace, dict) else None
    return [v for s in values if (v := _num(s)) is not None and v > 0] if isinstance(values, list) else []


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def judge(readings: dict[str, Any] | None) -> Verdict | None:
    """The rule on one lesson's readings (the host value HOST_VALUE); None where the lesson recorded none (a run
    recorded before the readings, or a replay of one)."""
    if not isinstance(readings, dict):
        return None
    reasons: list[str] = []
    cores = int(_num(readings.get("cores")) or 0)
    threads = int(_num(readings.get("server_threads")) or 0)
    loads = [(str(r.get("at", "")), v) for r in readings.get("load_average") or []
             if isinstance(r, dict) and (v := _num(r.get("load1"))) is not None]
    if loads and cores:
        at, highest = max(loads, key=lambda p: p[1])
        load = f"load average {highest:.2g} on {cores} cores"
        if highest > load_limit(cores, threads):
            reasons.append(f"{load} ({at}), above {_fmt(load_limit(cores, threads))}: the server's {threads} threads, "
                           f"one for the run, the {max(0, cores - threads)} cores the server leaves free and {LOAD_MARGIN:g}")
    else:
        load = "the load average is not available on this platform"
    highest_load = max((v for _, v in loads), default=None)
    cpu = readings.get("cpu")
    share = _num(cpu.get("foreign_share")) if isinstance(cpu, dict) else None
    if share is not None and share > FOREIGN_SHARE:
        reasons.append(f"other processes used {share:.0%} of the cores' time during the lesson "
                       f"(more than {FOREIGN_SHARE:.0%})")
    stretches = [s for s in readings.get("stretches") or [] if isinstance(s, dict)
                 and (_num(s.get("seconds")) or 0) >= MIN_STRETCH_S and _num(s.get("foreign_share")) is not None]
    if stretches:
        worst = max(stretches, key=lambda s: s["foreign_share"])
        if worst["foreign_share"] > FOREIGN_SHARE and (share is None or share <= FOREIGN_SHARE):
            reasons.append(f"other processes used {worst['foreign_share']:.0%} of the cores' time over "
                           f"{_fmt(worst['seconds'])} s up to {worst.get('at', 'a turn')} (more than {FOREIGN_SHARE:.0%})")
    drift = readings.get("drift")
    drift = drift if isinstance(drift, dict) else {}
    change = _num(drift.get("change"))
    if change is not None and abs(change) > DRIFT and drift.get("ranges_overlap") is False:
        reasons.append(f"the memory bandwidth read {abs(change):.0%} {'lower' if change < 0 else 'higher'} after the "
                       f"decode work than before it, beyond both readings' ranges (more than {DRIFT:.0%})")
    for c in readings.get("collapsed") or []:
        if not isinstance(c, dict):
            continue
        what = str(c.get("measurement"))
        settings = c.get("settings") or {}
        if settings:
            what += " (" + ", ".join(f"{k} {v}" for k, v in settings.items()) + ")"
        reasons.append(f"{what} went from {_fmt(c['first'])} to {_fmt(c['last'])} {c.get('unit', '')} between the "
                       "medians of its first and last samples")
    return Verdict(bool(reasons), tuple(reasons), load, highest_load)
