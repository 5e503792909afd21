"""A checked claim's verdict (`ClaimResult`) and the small readings every check shares.

Every claim of `bytesup check` ends as pass, fail (with both numbers and the tolerance),
inconclusive (the samples cannot tell) or not applicable (with what differs or is missing), and belongs to one
group (`GROUPS`): what it sets the run against, and so what its pass and its fail are worth. A fail against the course
is a finding about the machine and model the run measured (the course's statement does not hold there), not a sign
that the run is broken: `breaks` says which fails are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bytesup.course import robust
from bytesup.store.runs import Run
from bytesup.store.render import fmt
from bytesup.store.results import LessonResult, Measurement

PASS, FAIL, NA, INCONCLUSIVE = "pass", "fail", "not applicable", "inconclusive"

# What a claim sets the run against, and so what its pass and its fail are worth. Arithmetic that does not depend on
# the run is no claim at all: it is a unit test.
COURSE, ITSELF, SANITY, REFERENCE = "course", "itself", "sanity", "reference"
GROUPS: dict[str, tuple[str, str, str]] = {   # group: (title, what a pass shows, what a fail shows)
    COURSE: ("this run against the course's published figures",
             "the course's statement or figure holds on this machine and model",
             "a finding: the course's statement or figure does not hold on this machine and model; the run is not broken"),
    ITSELF: ("this run against itself: predictions and consistency",
             "the run's numbers agree with each other, the server's answers and the GGUF; its models predict what they left out",
             "the run's numbers disagree with each other, the server's answers or the GGUF, or a model missed what it left out"),
    SANITY: ("sanity checks: bounds any sound run meets",
             "nothing is broken; not evidence for any claim of the course",
             "something is broken"),
    REFERENCE: ("this run against a reference run",
                "the run repeats an earlier recorded run of the same model: agreement with the project, not the course",
                "the run does not repeat the reference run"),
}


def breaks(result: "ClaimResult") -> bool:
    """Whether a result says the run is off: a fail in any group but the course's, whose fails are findings about the
    machine and model (`bytesup check` exits 1 on these alone)."""
    return result.status == FAIL and result.group != COURSE


@dataclass
class ClaimResult:
    id: str
    source: str            # "general" or the reference's name
    lesson: str
    claim: str
    status: str            # pass | fail | inconclusive | not applicable
    observed: str = ""
    expected: str = ""
    tolerance: str = ""
    detail: str = ""
    group: str = ITSELF    # one of GROUPS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def find_lesson(run: Run, prefix: str) -> LessonResult | None:
    """The lesson whose id starts with `NN_` (ids may be renamed; the number is stable)."""
    for lid, result in run.results.items():
        if lid.startswith(prefix):
            return result
    return None


def missing(run: Run, prefix: str, name: str) -> str:
    """Why the lesson `prefix` is not there to check: it failed in this run, or it never ran."""
    problem = next((p for p in run.problems if p.startswith(prefix)), None)
    if problem:
        return f"lesson {name} did not finish in this run ({problem})"
    return f"lesson {name} not in this run"


def measurements(result: LessonResult, name: str) -> list[Measurement]:
    return [m for m in result.measurements if m.name == name]


def judged(m: Measurement) -> robust.Robust:
    """The measurement's samples by the one rule (bytesup.course.robust): median, range and spread without outliers."""
    return robust.judge(m.samples or [m.median])


def samples_text(m: Measurement) -> str:
    """The median and the range of the samples that are not outliers; outliers named after it."""
    r = judged(m)
    text = f"{fmt(m.median)} ({fmt(r.low)}–{fmt(r.high)}, {len(m.samples)} samples"
    if r.outliers:
        text += f"; outlier{'s' if len(r.outliers) > 1 else ''} {', '.join(fmt(v) for v in r.outlier_values)} not used"
    return text + ")"
