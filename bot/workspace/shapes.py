"""The thread shapes a workspace chooses (``/agent-limits display|verbosity``, App Home): closed sets of values."""

from __future__ import annotations

from typing import Literal, get_args

#: How much of each step a thread shows: every step, or a compact line per step.
Verbosity = Literal["full", "compact"]
#: The thread shape: ``replies`` (a reply per step), or one streamed reply with task cards (``timeline``) or with
#: the task cards grouped in a plan block (``plan``).
Display = Literal["replies", "timeline", "plan"]
VERBOSITIES: tuple[Verbosity, ...] = get_args(Verbosity)
DISPLAYS: tuple[Display, ...] = get_args(Display)
