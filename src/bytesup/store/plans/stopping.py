"""A plan's stopping rule for one measurement, as the run records it (bytesup.course.stopping applies it): at least
`minimum` samples and at most `maximum`, stopping before that once every figure the claims read has its median known
to `tight` (a fraction of it), or once the samples' own time has reached `budget_s` seconds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bytesup.course import stopping


class StoppingRule(BaseModel):
    """When one measurement of a plan stops taking samples (bytesup.course.stopping)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    minimum: int = Field(description="samples at least (a median's uncertainty needs two values of each figure)")
    maximum: int = Field(description="samples at most: the run's --repeat, and at least the minimum")
    tight: float = Field(description="the median's uncertainty, a fraction of it, at which the claims need no more")
    budget_s: float = Field(description="seconds of the samples' own time after which no more are taken")

    def rule(self) -> stopping.Rule:
        return stopping.Rule(self.minimum, self.maximum, self.tight, self.budget_s)


def up_to(repeat: int, minimum: int, tight: float, budget_s: float) -> StoppingRule:
    """The rule of a run made now: at least `minimum` samples, at most the run's --repeat (never below the minimum)."""
    rule = StoppingRule(minimum=minimum, maximum=max(minimum, repeat), tight=tight, budget_s=budget_s)
    rule.rule()  # refused here, not halfway through the lesson, when it cannot be applied
    return rule
