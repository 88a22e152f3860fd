"""Trace records of tool calls, the ``TraceSink`` port, an in-memory sink and the calls' OpenTelemetry spans."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The OpenTelemetry tracer of the calls' spans (None: none are made), and whether they carry the calls'
#: arguments and results (``use_tool_tracer``: agent_core's ``use_tracer`` hands both in).
_tracer: Any = None
_content = False


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One tool call as it happened, with secrets already redacted."""

    #: The run this call belongs to (``ToolContext.run_id``).
    run_id: str
    #: The loop step (``ToolContext.step``).
    step: int
    #: The model's tool-call id.
    call_id: str
    #: The tool name as the model asked for it (may be unknown).
    tool: str
    #: Arguments, redacted: validated when valid, as sent otherwise.
    arguments: dict[str, Any]
    #: Wall-clock start, epoch seconds.
    started_at: float
    #: Monotonic duration of the whole call, approval wait included.
    duration_ms: float
    #: ``Outcome`` value (``ok``, ``timeout``...).
    outcome: str
    #: Length of the whole (redacted) result.
    chars_full: int
    #: Length of what entered the history after shaping.
    chars_shaped: int
    #: The whole redacted result, so a user can ask for it later.
    result_full: str
    #: The error text; "" when the call succeeded.
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``dataclasses.asdict(self)`` without its generic walk (~15 µs): the fields are plain values and the
        arguments JSON-like, whose containers are copied the same way."""
        return {
            "run_id": self.run_id, "step": self.step, "call_id": self.call_id, "tool": self.tool,
            "arguments": _copied(self.arguments), "started_at": self.started_at, "duration_ms": self.duration_ms,
            "outcome": self.outcome, "chars_full": self.chars_full, "chars_shaped": self.chars_shaped,
            "result_full": self.result_full, "error": self.error,
        }


def record_dict(rec: Any) -> dict[str, Any]:
    """A trace record as the dict a store writes: a ``TraceRecord`` (the Executor's, by its fast ``to_dict``),
    another dataclass, or a mapping."""
    if type(rec) is TraceRecord:
        return rec.to_dict()
    if dataclasses.is_dataclass(rec) and not isinstance(rec, type):
        return dataclasses.asdict(rec)
    if isinstance(rec, Mapping):
        return dict(rec)
    raise TypeError(f"a trace record must be a dataclass or a mapping, got {type(rec).__name__}")


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


class TraceSink(Protocol):
    """Where trace records go (memory in tests, Redis in the service)."""

    async def record(self, rec: TraceRecord) -> None:
        """Store one record."""
        ...


@dataclass
class InMemoryTraceSink:
    """Keeps every record in ``records``, in call order."""

    records: list[TraceRecord] = field(default_factory=list)

    async def record(self, rec: TraceRecord) -> None:
        """Append the record."""
        self.records.append(rec)


def use_tool_tracer(tracer: Any, *, content: bool = False) -> None:
    """Spans of the calls through ``tracer`` (an OpenTelemetry ``Tracer``; None: none), with their arguments and
    results only when ``content``."""
    global _tracer, _content
    _tracer, _content = tracer, content


@contextlib.contextmanager
def tool_span(tool: str, call_id: str, run_id: str) -> Iterator[Any]:
    """The call's ``execute_tool {tool}`` span (OpenTelemetry's GenAI conventions), current while the call runs (an
    MCP tool's own client span nests in it); a no-op yielding None while no tracer is handed in."""
    if _tracer is None:
        yield None
        return
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
                  "gen_ai.tool.type": "function", "agent.run_id": run_id}
    # The outcome is ``finish_span``'s to set: an exception's message may quote the call's arguments.
    with _tracer.start_as_current_span(f"execute_tool {tool}", attributes=attributes, record_exception=False,
                                       set_status_on_exception=False) as span:
        yield span


def finish_span(span: Any, rec: TraceRecord) -> None:
    """Put the record's outcome on the span (no-op without one); its arguments and result only with content on."""
    if span is None:
        return
    span.set_attributes({"agent.tool.outcome": rec.outcome, "agent.tool.chars_full": rec.chars_full,
                         "agent.tool.chars_shaped": rec.chars_shaped})
    if rec.error:
        from opentelemetry.trace import StatusCode

        span.set_attribute("error.type", rec.outcome)
        span.set_status(StatusCode.ERROR)
    if _content:
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(rec.arguments, ensure_ascii=False))
        span.set_attribute("gen_ai.tool.call.result", rec.result_full)
