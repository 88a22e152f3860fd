"""One tool call: lookup → validate → exfiltration guard → approve → run (timeout) → redact → shape → trace.

The engine calls ``prepare`` for each call the model made (pure, no I/O: the engine's loop detector
compares ``PreparedCall.canonical``), then ``execute``. Model mistakes and tool failures come back as
``ToolResult`` values with an ``Outcome``; only ``asyncio.CancelledError`` (the engine cancelling a
call) propagates::

    executor = Executor(registry, trace=sink, observation_max_chars=settings.agent_observation_max_chars,
                        secrets=settings.secrets())
    call = executor.prepare("calculator", '{"expression": "2+2"}', call_id="call_1")
    result = await executor.execute(call, ToolContext(run_id="r1", step=1, task="add"))

The executor holds its run's exfiltration guard (``tools.exfiltration``): use one executor per run, as the
engine does, so what one run read never restricts, nor is forgotten by, another.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from pydantic import BaseModel, ValidationError

from tools.context import Parked, ToolContext
from tools.egress import DEFAULT_GUARD_MODE, EgressHeld, GuardMode
from tools.exfiltration import ExfiltrationGuard
from tools.redact import Redactor
from tools.registry import Registry
from tools.result import Outcome, ToolResult
from tools.schema import strict_schema
from tools.shaping import shape
from tools.tool import Tool
from tools.tracing import TraceRecord, TraceSink, finish_span, tool_span

#: The longest tool observation (characters) that enters the history, unless told otherwise
#: (``AGENT_OBSERVATION_MAX_CHARS``); longer results are shaped, the full result stays in the trace.
DEFAULT_OBSERVATION_MAX_CHARS = 4000

log = logging.getLogger(__name__)

#: Results whose text is one of these (after stripping) are "empty": the tool ran but found nothing.
_EMPTY_TEXTS = frozenset({"", "[]", "{}", "null"})
#: Results up to this many characters are finished on the event loop (a thread hop costs more than them).
INLINE_RESULT_CHARS = 20_000
#: ... and other JSON results (numbers, lists, dicts) of at most this many values, numbers of at most 256 bits.
INLINE_RESULT_ITEMS, _INLINE_INT_BITS = 1_000, 256
UNKNOWN_TOOL_NAME = "unknown"  # a span's tool when the registry does not know it (never the model's own words)
#: An offending value quoted in a validation message is cut to this length.
_MAX_QUOTED = 60


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A tool call checked and ready to run (or, when ``error`` is set, one that must not run)."""

    #: The model's tool-call id.
    call_id: str
    #: The tool name as the model asked for it.
    tool: str
    #: Validated arguments (``model_dump(mode="json")``), or the raw parsed ones when invalid.
    arguments: dict[str, Any]
    #: ``name + "\\x1f" + sorted compact JSON of arguments``: equal for equal calls whatever the key order.
    canonical: str
    #: Set when the call must not run (unknown tool, invalid arguments); ``execute`` returns it.
    error: ToolResult | None = None
    #: The validated arguments model, kept so ``execute`` need not validate again.
    parsed: BaseModel | None = field(default=None, repr=False, compare=False)


class Executor:
    """Runs tool calls from one registry (usually a run's ``ToolPolicy`` view)."""

    def __init__(
        self,
        registry: Registry,
        *,
        trace: TraceSink | None = None,
        observation_max_chars: int = DEFAULT_OBSERVATION_MAX_CHARS,
        timeouts: Mapping[str, float] | None = None,
        secrets: Iterable[str] = (),
        exfiltration_guard: GuardMode | str = DEFAULT_GUARD_MODE,
    ) -> None:
        self._registry = registry
        self._trace = trace
        self._max_chars = observation_max_chars
        self._timeouts = dict(timeouts or {})
        self._redactor = Redactor(secrets)
        self._guard = ExfiltrationGuard(exfiltration_guard)

    @property
    def registry(self) -> Registry:
        """The tools this executor runs."""
        return self._registry

    @property
    def guard(self) -> ExfiltrationGuard:
        """This run's exfiltration guard."""
        return self._guard

    def remember_transcript(self, texts: Iterable[object]) -> None:
        """Arm the guard from a loaded conversation (message contents): private tool output read earlier."""
        self._guard.remember_transcript(texts, self._registry)

    def prepare(self, tool: str, arguments: str | Mapping[str, Any], *, call_id: str) -> PreparedCall:
        """Parse, look up and validate one call; no I/O, nothing runs."""
        raw, parse_error = _parse_arguments(arguments)
        found = self._registry.get(tool)
        if found is None:
            return _rejected(call_id, tool, raw, self._unknown_tool(tool))
        if parse_error is not None:
            return _rejected(call_id, tool, raw, self._invalid(found, [f"- {parse_error}"]))
        try:
            parsed = found.args_model.model_validate(_drop_null_defaults(found.args_model, raw))
        except ValidationError as exc:
            return _rejected(call_id, tool, raw, self._invalid(found, _error_lines(exc)))
        args = parsed.model_dump(mode="json")
        return PreparedCall(call_id, tool, args, canonical_call(tool, args), None, parsed)

    async def execute(self, call: PreparedCall, ctx: ToolContext) -> ToolResult:
        """Run a prepared call and return its result; never raises for tool problems."""
        started_at, t0 = time.time(), time.perf_counter()
        known = call.tool if self._registry.get(call.tool) is not None else UNKNOWN_TOOL_NAME
        with tool_span(known, call.call_id, ctx.run_id) as span:
            result = call.error or await self._run(call, ctx)
            rec = TraceRecord(
                run_id=ctx.run_id,
                step=ctx.step,
                call_id=call.call_id,
                tool=call.tool,
                arguments=self._redactor.redact_data(call.arguments),
                started_at=started_at,
                duration_ms=(time.perf_counter() - t0) * 1000,
                outcome=result.outcome.value,
                chars_full=len(result.full),
                chars_shaped=len(result.text),
                result_full=result.full,
                error="" if result.ok else result.text,
            )
            finish_span(span, rec)
        await self._record(rec)
        # Built directly: dataclasses.replace would cost a few microseconds more for the same value.
        return ToolResult(result.tool, result.outcome, result.text, result.full, result.empty, rec.duration_ms)

    async def _run(self, call: PreparedCall, ctx: ToolContext) -> ToolResult:
        tool = self._registry.get(call.tool)
        if tool is None:  # a PreparedCall built by hand, or prepared against another registry
            return self._failure(call.tool, Outcome.UNKNOWN_TOOL, self._unknown_tool(call.tool).text)
        args = call.parsed or tool.args_model.model_validate(call.arguments)
        held = await self._guard.clear(tool, call.arguments, ctx)
        if held is not None:
            return self._failure(tool.name, Outcome.HELD_BACK, held.detail)
        if tool.needs_approval:
            refusal = await self._ask_approval(tool, call, ctx)
            if refusal is not None:
                return refusal
        ctx = self._guarded(tool, call, ctx)
        timeout = self._timeouts.get(tool.name, tool.timeout_seconds)
        try:
            async with asyncio.timeout(timeout):
                value = await _invoke(tool, args, ctx)
        except EgressHeld as exc:
            await self._guard.notify(exc.held, ctx)
            return self._failure(tool.name, Outcome.HELD_BACK, exc.held.detail)
        except TimeoutError:
            # Also a tool's own network timeout (aiohttp raises TimeoutError subclasses): same meaning.
            return self._failure(tool.name, Outcome.TIMEOUT, f"{tool.name} timed out after {timeout:g}s")
        except Exception as exc:  # any tool bug or failure becomes an observation; the run goes on
            return self._failure(tool.name, Outcome.ERROR, _describe_exception(exc))
        try:
            result = await _off_loop_if_large(value, self._finish, tool.name, value, ctx)
        except (TypeError, ValueError) as exc:
            detail = f"{tool.name} returned a value that is not JSON-serialisable ({_describe_exception(exc)})"
            return self._failure(tool.name, Outcome.ERROR, detail)
        self._guard.observe(tool, result)
        return result

    def _guarded(self, tool: Tool, call: PreparedCall, ctx: ToolContext) -> ToolContext:
        """The call's context with the guard's checks made as it runs: a tool's hops, or the links it shows."""
        if tool.outbound:
            return replace(ctx, egress_hop=self._guard.hop_check(tool, call.arguments, ctx))
        if tool.shown_in_thread and self._guard.armed(ctx.egress):
            return replace(ctx, for_thread=partial(self._guard.answer, ctx=ctx))
        return ctx

    def _finish(self, tool: str, value: Any, ctx: ToolContext) -> ToolResult:
        """JSON, redaction and shaping of one result: CPU work, run off the loop when the result is large."""
        text = value if isinstance(value, str) else _to_json(value)
        full = self._redactor.redact(text)
        shaped = shape(full, self._max_chars, query=f"{ctx.task}\n{ctx.thought}")
        return ToolResult(tool, Outcome.OK, shaped, full, empty=text.strip() in _EMPTY_TEXTS)

    async def _ask_approval(self, tool: Tool, call: PreparedCall, ctx: ToolContext) -> ToolResult | None:
        try:
            approved = await ctx.approver.approve(tool.name, call.arguments, ctx)
        except Parked:  # the run is saved here and resumed once decided (``agent_core.parking``)
            raise
        except Exception as exc:  # fail closed: no answer from the approver is a refusal
            log.warning("approver failed for %s: %s", tool.name, _describe_exception(exc))
            approved = False
        return None if approved else self._failure(tool.name, Outcome.REFUSED, (
            f"{tool.name} needs approval before it runs, and this call was refused (not approved). It did not run; "
            "do not retry it unchanged."))

    def _failure(self, tool: str, outcome: Outcome, text: str) -> ToolResult:
        text = shape(self._redactor.redact(text), self._max_chars)
        return ToolResult(tool, outcome, text, text)

    def _unknown_tool(self, name: str) -> ToolResult:
        names = self._registry.names()
        suggestion = self._registry.suggest(name)
        parts = [f"Unknown tool {name!r}."]
        if suggestion:
            parts.append(f"Did you mean {suggestion!r}?")
        parts.append(
            f"Available tools: {', '.join(names)}." if names else "No tools are available in this run."
        )
        text = self._redactor.redact(" ".join(parts))
        return ToolResult(name, Outcome.UNKNOWN_TOOL, text, text)

    def _invalid(self, tool: Tool, lines: list[str]) -> ToolResult:
        props: dict[str, Any] = strict_schema(tool.args_model)["properties"]
        expected = ", ".join(props) or "no arguments"
        body = "\n".join(lines)
        text = f"Invalid arguments for {tool.name!r}:\n{body}\nExpected arguments: {expected}."
        return self._failure(tool.name, Outcome.INVALID_ARGUMENTS, text)

    async def _record(self, rec: TraceRecord) -> None:
        if self._trace is None:
            return
        try:
            await self._trace.record(rec)
        except Exception:  # a broken trace store must not fail the call it describes
            log.exception("trace sink failed for call %s", rec.call_id)


#: Made once: ``json.dumps`` with options builds an encoder per call.
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_call(tool: str, arguments: Mapping[str, Any]) -> str:
    """The loop detector's key: name + unit separator + arguments as sorted, compact JSON."""
    return f"{tool}\x1f{_CANONICAL_JSON.encode(arguments)}"


def _rejected(call_id: str, tool: str, raw: dict[str, Any], error: ToolResult) -> PreparedCall:
    return PreparedCall(call_id, tool, raw, canonical_call(tool, raw), error)


def _parse_arguments(arguments: str | Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(arguments as a dict, or None-free error text). Unparseable text is kept under ``_raw``."""
    if isinstance(arguments, Mapping):
        return dict(arguments), None
    if not arguments.strip():  # some models send "" for a call without arguments
        return {}, None
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        return {"_raw": arguments}, f"arguments are not valid JSON ({exc}); send one JSON object"
    if not isinstance(value, dict):
        return {"_raw": value}, f"arguments must be a JSON object, not {type(value).__name__}"
    return value, None


def _drop_null_defaults(model: type[BaseModel], raw: dict[str, Any]) -> dict[str, Any]:
    """Strict schemas make optional fields nullable: null means "use the default"."""
    if all(v is not None for v in raw.values()):  # the usual call: nothing to drop, no schema walk
        return raw
    optional: set[str] = set()
    for name, info in model.model_fields.items():
        if not info.is_required():
            optional.update({name, info.alias or name})
    return {k: v for k, v in raw.items() if not (v is None and k in optional)}


def _error_lines(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "(arguments)"
        line = f"- {where}: {err['msg']}"
        if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
            quoted = repr(err["input"])
            line += f" (got {quoted[:_MAX_QUOTED]}{'…' if len(quoted) > _MAX_QUOTED else ''})"
        lines.append(line)
    return lines


async def _invoke(tool: Tool, args: BaseModel, ctx: ToolContext) -> Any:
    handler = tool.handler
    is_async = inspect.iscoroutinefunction(handler) or (
        not inspect.isroutine(handler) and inspect.iscoroutinefunction(type(handler).__call__)
    )
    if is_async:
        return await handler(args, ctx)
    # Sync tools run in a worker thread so they cannot stall the event loop (and the other calls).
    value = await asyncio.to_thread(handler, args, ctx)
    return await value if inspect.isawaitable(value) else value


async def _off_loop_if_large(value: Any, fn: Callable[..., ToolResult], *args: Any) -> ToolResult:
    """``fn(*args)`` inline for a small result; in a worker thread for a large one (or one of unknown size),
    so redacting, serialising and shaping megabytes never holds the event loop (and every other run)."""
    if _small(value):
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def _small(value: Any) -> bool:
    """Whether ``value`` is plain JSON data within :data:`INLINE_RESULT_CHARS` characters of text and
    :data:`INLINE_RESULT_ITEMS` values (looked at no further than that): an int or a short list is finished on
    the loop, where a thread hop cost more; a model, an object or a huge number goes to a thread."""
    if isinstance(value, str):
        return len(value) <= INLINE_RESULT_CHARS
    chars, items, stack = 0, 1, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            chars += len(item)
            if chars > INLINE_RESULT_CHARS:
                return False
        elif isinstance(item, int):  # bool too
            if item.bit_length() > _INLINE_INT_BITS:
                return False
        elif item is None or isinstance(item, float):
            continue
        elif isinstance(item, list | tuple | dict):
            items += len(item) * (2 if isinstance(item, dict) else 1)  # a dict's keys and values
            if items > INLINE_RESULT_ITEMS:
                return False
            stack.extend([*item.keys(), *item.values()] if isinstance(item, dict) else item)
        else:
            return False
    return True


def _to_json(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, ensure_ascii=False)


def _describe_exception(exc: BaseException) -> str:
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
