"""The outcome of one tool call, as the loop, the stopper and the renderers see it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    """How a tool call ended. Anything but ``ok`` is a failed step for the no-progress layer."""

    OK = "ok"
    INVALID_ARGUMENTS = "invalid_arguments"
    UNKNOWN_TOOL = "unknown_tool"
    TIMEOUT = "timeout"
    ERROR = "error"
    REFUSED = "refused"
    #: The exfiltration guard stopped an outbound call (the thread shows "held back"); see ``tools.egress``.
    HELD_BACK = "held_back"


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One call's result.

    ``text`` is what enters the history (redacted, shaped to the observation cap); ``full`` is the
    whole redacted result, kept in the trace so a user can ask for it later.
    """

    tool: str
    outcome: Outcome
    text: str
    full: str
    #: True when the tool ran fine but found nothing (``[]``, ``""``, ``{}``): counts as no progress.
    empty: bool = False
    #: Wall time of the call (validation, approval, the tool, shaping), set by the Executor.
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def shaped(self) -> bool:
        """True when ``text`` is a cut of ``full``."""
        return len(self.text) < len(self.full)
