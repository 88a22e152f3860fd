"""Executor: prepare (lookup, JSON, validation, canonical form) and execute (approval, timeout, errors,
redaction, shaping, empty results, traces, cancellation)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from tools import (
    Executor,
    InMemoryTraceSink,
    Outcome,
    Registry,
    ToolContext,
    TraceRecord,
    tool,
)
from tools.builtins.calculator import calculator
from tools.builtins.channel_history import channel_history


class TextArgs(BaseModel):
    text: str = ""


class NoArgs(BaseModel):
    pass


@tool(timeout=0.05)
async def hang(args: NoArgs, ctx: ToolContext) -> str:
    """Wait forever."""
    await asyncio.Event().wait()  # never set: runs until timed out or cancelled
    return "unreachable"


@tool()
async def boom(args: NoArgs, ctx: ToolContext) -> str:
    """Fail."""
    raise ValueError("the flux capacitor is empty")


@tool()
async def leak(args: TextArgs, ctx: ToolContext) -> str:
    """Return a secret-looking text."""
    return f"token xoxb-1234-5678-abcdefghijkl and key sk-proj-{'a1B2' * 8} and {args.text}"


@tool()
def sync_upper(args: TextArgs, ctx: ToolContext) -> str:
    """Upper-case in a worker thread."""
    where = "main" if threading.current_thread() is threading.main_thread() else "worker"
    return f"{args.text.upper()} from {where}"


@tool()
async def nothing(args: TextArgs, ctx: ToolContext) -> Any:
    """Return an empty value chosen by the text."""
    return {"list": [], "dict": {}, "none": None, "blank": "  \n", "str": ""}[args.text]


@tool()
async def structured(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return a dict."""
    return {"b": 1, "a": ["é"]}


@tool()
async def unserialisable(args: NoArgs, ctx: ToolContext) -> object:
    """Return something json cannot write."""
    return object()


@tool()
async def long_text(args: NoArgs, ctx: ToolContext) -> str:
    """Return a long text."""
    return "lorem ipsum dolor sit amet. " * 1000


@tool(needs_approval=True)
async def delete_everything(args: NoArgs, ctx: ToolContext) -> str:
    """Dangerous."""
    return "deleted"


def make_executor(**kwargs: Any) -> Executor:
    registry = Registry(
        [
            calculator,
            channel_history,
            hang,
            boom,
            leak,
            sync_upper,
            nothing,
            structured,
            unserialisable,
            long_text,
            delete_everything,
        ]
    )
    return Executor(registry, **kwargs)


# -- prepare ------------------------------------------------------------------------------------------


def test_prepare_validates_and_dumps_arguments() -> None:
    call = make_executor().prepare("calculator", '{"expression": "1+1"}', call_id="c1")
    assert call.error is None
    assert call.call_id == "c1" and call.tool == "calculator"
    assert call.arguments == {"expression": "1+1"}
    assert call.canonical == 'calculator\x1f{"expression":"1+1"}'


def test_canonical_ignores_key_order_whitespace_and_defaults() -> None:
    executor = make_executor()
    a = executor.prepare("channel_history", '{"limit": 20}', call_id="a")
    b = executor.prepare("channel_history", "{ }", call_id="b")
    c = executor.prepare("channel_history", {"limit": None}, call_id="c")
    assert a.canonical == b.canonical == c.canonical == 'channel_history\x1f{"limit":20}'
    x = executor.prepare("leak", '{"text": "é",   "x": 1}', call_id="x")  # extra key ignored by the model
    y = executor.prepare("leak", {"text": "é"}, call_id="y")
    assert x.canonical == y.canonical and "é" in x.canonical


def test_unknown_tool_names_it_suggests_and_lists() -> None:
    call = make_executor().prepare("calculater", '{"expression": "1"}', call_id="c1")
    assert call.error is not None
    assert call.error.outcome is Outcome.UNKNOWN_TOOL
    text = call.error.text
    assert "'calculater'" in text
    assert "Did you mean 'calculator'?" in text
    assert "Available tools: calculator, channel_history, hang" in text
    assert call.arguments == {"expression": "1"}


def test_unknown_tool_without_a_close_name_has_no_suggestion() -> None:
    call = make_executor().prepare("xyzzy", "{}", call_id="c1")
    assert call.error is not None and "Did you mean" not in call.error.text


def test_validation_errors_are_listed_field_by_field() -> None:
    executor = make_executor()
    missing = executor.prepare("calculator", "{}", call_id="c1")
    assert missing.error is not None
    assert missing.error.outcome is Outcome.INVALID_ARGUMENTS
    assert "- expression: Field required" in missing.error.text
    assert "Expected arguments: expression." in missing.error.text

    wrong = executor.prepare("channel_history", '{"limit": 500}', call_id="c2")
    assert wrong.error is not None
    assert "- limit: Input should be less than or equal to 100 (got 500)" in wrong.error.text
    assert wrong.arguments == {"limit": 500}  # raw arguments are kept when invalid

    typed = executor.prepare("channel_history", '{"limit": "many"}', call_id="c3")
    assert typed.error is not None and "- limit: Input should be a valid integer" in typed.error.text


def test_bad_json_and_non_object_json_are_invalid_arguments() -> None:
    executor = make_executor()
    bad = executor.prepare("calculator", '{"expression": ', call_id="c1")
    assert bad.error is not None and bad.error.outcome is Outcome.INVALID_ARGUMENTS
    assert "not valid JSON" in bad.error.text
    assert bad.arguments == {"_raw": '{"expression": '}
    listed = executor.prepare("calculator", "[1, 2]", call_id="c2")
    assert listed.error is not None and "must be a JSON object, not list" in listed.error.text


# -- execute ------------------------------------------------------------------------------------------


async def test_execute_runs_and_traces(ctx: ToolContext) -> None:
    sink = InMemoryTraceSink()
    executor = make_executor(trace=sink)
    result = await executor.execute(
        executor.prepare("calculator", '{"expression": "6*7"}', call_id="c1"), ctx
    )
    assert result.outcome is Outcome.OK and result.ok
    assert result.text == result.full == "42"
    assert result.tool == "calculator" and not result.empty
    (rec,) = sink.records
    assert isinstance(rec, TraceRecord)
    assert (rec.run_id, rec.step, rec.call_id, rec.tool) == ("r1", 1, "c1", "calculator")
    assert rec.arguments == {"expression": "6*7"}
    assert rec.outcome == "ok" and rec.error == ""
    assert rec.chars_full == rec.chars_shaped == 2 and rec.result_full == "42"
    assert rec.duration_ms >= 0 and rec.started_at > 1.6e9


def test_a_trace_records_dict_is_its_asdict() -> None:
    import dataclasses

    args = {"q": "x", "nested": [{"a": 1}, None, 2.5], "n": True}
    rec = TraceRecord("r1", 2, "c1", "search", args, 1.7e9, 3.5, "error", 10, 8, "full", "boom")
    as_dict = rec.to_dict()
    assert list(as_dict.items()) == list(dataclasses.asdict(rec).items())  # same keys, same order
    assert as_dict["arguments"] is not args and as_dict["arguments"]["nested"][0] is not args["nested"][0]


async def test_errors_returned_by_prepare_are_traced_too(ctx: ToolContext) -> None:
    sink = InMemoryTraceSink()
    executor = make_executor(trace=sink)
    result = await executor.execute(executor.prepare("nope", "{}", call_id="c1"), ctx)
    assert result.outcome is Outcome.UNKNOWN_TOOL
    assert sink.records[0].outcome == "unknown_tool" and "Unknown tool 'nope'" in sink.records[0].error


async def test_sync_tools_run_in_a_worker_thread(ctx: ToolContext) -> None:
    executor = make_executor()
    result = await executor.execute(executor.prepare("sync_upper", '{"text": "hi"}', call_id="c1"), ctx)
    assert result.text == "HI from worker"


async def test_structured_results_are_rendered_as_json(ctx: ToolContext) -> None:
    executor = make_executor()
    result = await executor.execute(executor.prepare("structured", "", call_id="c1"), ctx)
    assert json.loads(result.text) == {"b": 1, "a": ["é"]}
    assert "é" in result.text  # not \\u-escaped


@pytest.mark.parametrize(("value", "text"), [
    (42, "42"), (2.5, "2.5"), (True, "true"), ([1, "two", None], '[1, "two", null]'),
    (list(range(5000)), json.dumps(list(range(5000)))), ({"k": "v" * 30_000}, json.dumps({"k": "v" * 30_000})),
    (10**100, str(10**100)),
], ids=["int", "float", "bool", "short list", "long list", "long text in a dict", "huge int"])
async def test_numbers_lists_and_dicts_of_any_size_are_rendered_as_json(value: Any, text: str,
                                                                        ctx: ToolContext) -> None:
    @tool(name="give", description="Return the value.")
    async def give(args: NoArgs, ctx: ToolContext) -> Any:
        return value

    executor = Executor(Registry([give]))
    result = await executor.execute(executor.prepare("give", "{}", call_id="c1"), ctx)
    assert result.outcome is Outcome.OK and result.full == text


def test_only_small_plain_results_are_finished_on_the_event_loop() -> None:
    from tools.executor import _small

    circular: list[Any] = []
    circular.append(circular)
    assert all(_small(v) for v in (42, 2.5, None, True, "x" * 20_000, [1, "a", {"k": [2.0]}], {"a": 1}))
    assert not any(_small(v) for v in ("x" * 20_001, list(range(1001)), {"k": "v" * 20_001}, 2**300,
                                       [["x" * 15_000], ["y" * 15_000]], circular, object(), NoArgs(), {1, 2}))


async def test_timeout_outcome(ctx: ToolContext) -> None:
    sink = InMemoryTraceSink()
    executor = make_executor(trace=sink)
    result = await executor.execute(executor.prepare("hang", "{}", call_id="c1"), ctx)
    assert result.outcome is Outcome.TIMEOUT
    assert result.text == "hang timed out after 0.05s"
    assert sink.records[0].outcome == "timeout"


async def test_per_tool_timeout_override(ctx: ToolContext) -> None:
    executor = make_executor(timeouts={"hang": 0.01})
    result = await executor.execute(executor.prepare("hang", "{}", call_id="c1"), ctx)
    assert result.text == "hang timed out after 0.01s"


async def test_exception_becomes_error_with_type_and_message(ctx: ToolContext) -> None:
    sink = InMemoryTraceSink()
    executor = make_executor(trace=sink)
    result = await executor.execute(executor.prepare("boom", "{}", call_id="c1"), ctx)
    assert result.outcome is Outcome.ERROR
    assert result.text == "ValueError: the flux capacitor is empty"
    assert sink.records[0].error == result.text


async def test_unserialisable_result_is_an_error(ctx: ToolContext) -> None:
    executor = make_executor()
    result = await executor.execute(executor.prepare("unserialisable", "{}", call_id="c1"), ctx)
    assert result.outcome is Outcome.ERROR and "not JSON-serialisable" in result.text


async def test_secrets_are_redacted_in_results_and_trace_arguments(ctx: ToolContext) -> None:
    sink = InMemoryTraceSink()
    executor = make_executor(trace=sink, secrets=["my-signing-secret-value", "short"])
    args = {"text": "xoxp-999-888-zyxwvutsrq and my-signing-secret-value and short"}
    result = await executor.execute(executor.prepare("leak", args, call_id="c1"), ctx)
    for text in (result.text, result.full, sink.records[0].result_full):
        assert "xoxb-" not in text and "xoxp-" not in text and "sk-proj" not in text
        assert "my-signing-secret-value" not in text
        assert text.count("[redacted]") == 4
        assert "short" in text  # too short to be treated as a secret
    assert sink.records[0].arguments == {"text": "[redacted] and [redacted] and short"}


async def test_empty_results_are_flagged(ctx: ToolContext) -> None:
    executor = make_executor()
    for which in ("list", "dict", "none", "blank", "str"):
        call = executor.prepare("nothing", {"text": which}, call_id=which)
        result = await executor.execute(call, ctx)
        assert result.ok and result.empty, which
    full = await executor.execute(executor.prepare("structured", "{}", call_id="s"), ctx)
    assert not full.empty


async def test_long_results_are_shaped_and_the_trace_keeps_the_full_text(ctx: ToolContext) -> None:
    sink = InMemoryTraceSink()
    executor = make_executor(trace=sink, observation_max_chars=500)
    result = await executor.execute(executor.prepare("long_text", "{}", call_id="c1"), ctx)
    assert len(result.text) <= 500 and result.shaped
    assert len(result.full) == 28_000
    assert "characters omitted" in result.text
    rec = sink.records[0]
    assert (rec.chars_full, rec.chars_shaped) == (28_000, len(result.text))
    assert rec.result_full == result.full


class Approving:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[tuple[str, Mapping[str, Any]]] = []

    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        self.asked.append((tool, arguments))
        return self.answer


class BrokenApprover:
    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        raise ConnectionError("slack is down")


async def test_needs_approval_is_refused_by_refuse_all(ctx: ToolContext) -> None:
    executor = make_executor()
    result = await executor.execute(executor.prepare("delete_everything", "{}", call_id="c1"), ctx)
    assert result.outcome is Outcome.REFUSED
    assert "needs approval" in result.text and "refused" in result.text


async def test_needs_approval_runs_when_approved_and_fails_closed(ctx: ToolContext) -> None:
    executor = make_executor()
    approver = Approving(True)
    approved_ctx = ToolContext(run_id="r1", step=1, approver=approver)
    result = await executor.execute(executor.prepare("delete_everything", "{}", call_id="c1"), approved_ctx)
    assert result.text == "deleted" and approver.asked == [("delete_everything", {})]
    # A tool that does not need approval never asks.
    await executor.execute(executor.prepare("structured", "{}", call_id="c2"), approved_ctx)
    assert len(approver.asked) == 1
    broken_ctx = ToolContext(run_id="r1", step=1, approver=BrokenApprover())
    refused = await executor.execute(executor.prepare("delete_everything", "{}", call_id="c3"), broken_ctx)
    assert refused.outcome is Outcome.REFUSED


async def test_cancellation_propagates(ctx: ToolContext) -> None:
    entered = asyncio.Event()

    @tool(timeout=60)
    async def stuck(args: NoArgs, ctx: ToolContext) -> str:
        """Signal, then wait forever."""
        entered.set()
        await asyncio.Event().wait()
        return "unreachable"

    executor = Executor(Registry([stuck]), trace=InMemoryTraceSink())
    task = asyncio.create_task(executor.execute(executor.prepare("stuck", "{}", call_id="c1"), ctx))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class FailingSink:
    async def record(self, rec: TraceRecord) -> None:
        raise RuntimeError("redis is down")


async def test_a_failing_trace_sink_does_not_fail_the_call(ctx: ToolContext) -> None:
    executor = make_executor(trace=FailingSink())
    result = await executor.execute(executor.prepare("calculator", '{"expression": "1"}', call_id="c1"), ctx)
    assert result.ok and result.text == "1"
