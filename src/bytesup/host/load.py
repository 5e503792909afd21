"""Read how loaded this machine is while a lesson runs: the load average, and the CPU time other processes used.

A `Watch` reads the machine when a lesson starts, between its turns (at most every MIN_TURN_S) and when it ends; its
`record` is the lesson's host value `machine_load`, which `bytesup.course.busy.judge` reads. The CPU time of "other
processes" is the time every core spent busy (/proc/stat) less the time of the run's own process tree (this process,
its servers and their children, from /proc/<pid>/stat) and of any server given by pid. On a platform without /proc the
CPU figures are None, and without os.getloadavg the load average is too: the rule then says the figure is not
available rather than guess.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from bytesup.course import busy

PROC = Path("/proc")
MIN_TURN_S = 5.0   # readings between turns closer than this are skipped: a stretch that short tells nothing


def load1() -> float | None:
    """The 1-minute load average, None where the platform has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def cpu_ticks(proc: Path = PROC) -> tuple[int, int] | None:
    """(all, busy) clock ticks every core has spent since boot, from /proc/stat's first line: busy is all but idle and
    iowait (steal counts as busy: another guest had the core). None without /proc/stat."""
    try:
        first = (proc / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    fields = [int(x) for x in first[1:9]]   # user nice system idle iowait irq softirq steal (guests are in user)
    total = sum(fields)
    return total, total - fields[3] - (fields[4] if len(fields) > 4 else 0)


def _stat(pid: str, proc: Path) -> tuple[int, int] | None:
    """(parent pid, ticks of the process and its waited-for children) from /proc/<pid>/stat."""
    try:
        text = (proc / pid / "stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()
    try:
        return int(rest[1]), sum(int(x) for x in rest[11:15])   # ppid; utime stime cutime cstime
    except (IndexError, ValueError):
        return None


def tree_ticks(roots: Iterable[int], proc: Path = PROC) -> int | None:
    """Clock ticks used by the processes `roots` and every process under them (with the children they have waited
    for); None without /proc."""
    try:
        pids = [p.name for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    stats = {int(pid): s for pid in pids if (s := _stat(pid, proc)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    todo = [r for r in roots if r in stats]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += children.get(pid, [])
    return sum(stats[p][1] for p in seen)


def foreign_share(before: dict[str, Any], after: dict[str, Any]) -> float | None:
    """The share of every core's time between two readings (`reading`) that other processes used: the cores' busy
    ticks less the run's own, over all ticks, within [0, 1]; None where either reading lacks the CPU figures."""
    a, b = after.get("cpu"), before.get("cpu")
    if not (a and b):
        return None
    total = a[0] - b[0]
    if total <= 0:
        return None
    foreign = (a[1] - b[1]) - (after["own"] - before["own"])
    return min(1.0, max(0.0, foreign / total))


class Watch:
    """The readings of one lesson: `start`, `turn` between its turns, `record` at its end (see the module's doc).
    `servers` names the pids of servers the run uses that are not its children (a server it did not start)."""

    def __init__(self, cores: int | None, server_threads: int, servers: Callable[[], list[int]] = list,
                 proc: Path | None = None, clock: Callable[[], float] = time.monotonic):
        self.cores = cores or os.cpu_count() or 1
        self.server_threads = server_threads
        self.servers = servers
        self.proc = proc if proc is not None else PROC
        self.clock = clock
        self.readings: list[dict[str, Any]] = []

    def reading(self, at: str) -> dict[str, Any]:
        cpu = cpu_ticks(self.proc)
        own = tree_ticks([os.getpid(), *self.servers()], self.proc) if cpu is not None else None
        return {"at": at, "t": self.clock(), "load1": load1(), "cpu": cpu if own is not None else None, "own": own}

    def start(self) -> None:
        self.readings = [self.reading("before")]

    def turn(self, at: str = "") -> None:
        """A reading between turns, unless the last was taken less than MIN_TURN_S ago."""
        if self.readings and self.clock() - self.readings[-1]["t"] < MIN_TURN_S:
            return
        self.readings.append(self.reading(at or f"turn {len(self.readings)}"))

    def record(self, final: str = "after", extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The lesson's readings as plain JSON (`bytesup.course.busy`'s form), with a last reading `final` taken now;
        `extra` adds the drift or the collapsed timings."""
        readings = [*self.readings, self.reading(final)]
        first, last = readings[0], readings[-1]
        share = foreign_share(first, last)
        stretches = [{"at": b["at"], "seconds": round(b["t"] - a["t"], 1), "foreign_share": round(s, 3)}
                     for a, b in zip(readings, readings[1:], strict=False) if (s := foreign_share(a, b)) is not None]
        return {"cores": self.cores, "server_threads": self.server_threads,
                "load_average": [{"at": r["at"], "load1": r["load1"]} for r in readings if r["load1"] is not None],
                "cpu": None if share is None else {"seconds": round(last["t"] - first["t"], 1),
                                                   "foreign_share": round(share, 3)},
                "stretches": stretches if len(stretches) > 1 else [], **(extra or {})}

    def verdict(self, final: str = "now") -> busy.Verdict | None:
        """The rule on the readings so far and one taken now (for an error raised mid-lesson)."""
        return busy.judge(self.record(final))


def listening_pids(port: int) -> list[int]:
    """The pids of this user's processes listening on TCP `port` here (a server the run uses but did not start),
    [] where the platform will not say."""
    try:
        import psutil

        return sorted({c.pid for c in psutil.net_connections(kind="tcp")
                       if c.pid and c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port})
    except Exception:  # psutil may be refused the sockets' owners (another user's, some platforms): none known
        return []
