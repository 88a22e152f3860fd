"""How far the engine's prompt-token counts are from the provider's, learned from the usage it reports.

The engine counts every request offline, before the call, to cap it and to hold its worst case against the
budget. A count made with another model's tokenizer, or a provider that counts more than it is sent (a
gateway's hidden preamble, a template's tokens), makes that count wrong in a steady direction. So every call
whose usage reports its prompt tokens sets the factor (reported over counted) that the next calls' counts are
multiplied by: the run's own once it has one, else the workspace's (kept by its budget, which every run's settle
updates), else the counter's stated margin.
"""

from __future__ import annotations

import math

from agent_core.budget.port import Budget

#: The bounds of a factor, so one odd usage report cannot make a run's counts absurd.
MIN_FACTOR, MAX_FACTOR = 0.1, 20.0


class Calibration:
    """One run's factor from counted to reported prompt tokens."""

    def __init__(self, margin: float, budget: Budget | None = None) -> None:
        self.margin = margin
        #: Keeps the workspace's factor, as its runs' settles last reported it.
        self.budget = budget
        #: The run's own factor, from its last call with a usage report.
        self.observed: float | None = None

    def factor(self) -> float:
        """The factor for the next call: the run's own, else the workspace's, else the counter's margin."""
        workspace = self.budget.prompt_factor if self.budget is not None else None
        return self.observed or workspace or self.margin

    def observe(self, counted: int, reported: int) -> float | None:
        """Learn from one call (``counted`` offline, ``reported`` by the provider); the factor, None when the
        provider reported no prompt tokens."""
        if counted <= 0 or reported <= 0:
            return None
        self.observed = min(max(reported / counted, MIN_FACTOR), MAX_FACTOR)
        return self.observed


def scaled(tokens: int, factor: float) -> int:
    """``tokens`` counted offline, as the provider will count them (rounded up)."""
    return math.ceil(tokens * factor)


def unscaled(tokens: int, factor: float) -> int:
    """How many offline-counted tokens fit in ``tokens`` as the provider counts them (rounded down)."""
    return math.floor(tokens / factor)
