"""Traces: one signed mention into the running app, its job drained by a worker, seen as one tree of spans
(receipt → job → run → LLM calls and tool calls) through the SDK's in-memory exporter; message text only on request;
nothing set up without OTEL_* settings."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agent_core.telemetry as engine_telemetry
from agent_core import ConfigError
from bot import telemetry
from bot.identity import Conversation, Workspace
from bot.settings import Settings
from tests.bot.conftest import BOT_TOKEN, SECRET, App
from tests.conftest import session_redis_url
from tests.fakes.openai_server import FakeOpenAI, error, text, tool_calls
from tests.fakes.otlp_collector import ExportedSpan, FakeCollector
from tests.fakes.slack_api import FakeSlack
from tests.processes import ROOT, BotProcess, free_port
from tests.signing import event_body, mention, next_ts, signed_headers

QUESTION = "what is 17 times 23?"
ANSWER = "It is **391**."


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Where the test's spans go (``traced``); tracing is off again after the test."""
    yield InMemorySpanExporter()
    telemetry.use(None)


def traced(exporter: InMemorySpanExporter, *, content: bool = False) -> None:
    """Every span of the service and the engine from now on, into ``exporter`` (a provider of the test's own)."""
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(provider, content=content)


async def one_mention(app: App, fake_openai: FakeOpenAI) -> str:
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "17*23"}), content="Multiplying."),
        text(ANSWER, prompt_tokens=120, completion_tokens=8),
    )
    ts = next_ts()
    resp = await app.post_event(event_body(mention(text=f"<@UBOT> {QUESTION}", ts=ts), event_id="Ev123"))
    assert resp.status == 200
    await app.drain()
    return ts


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def child_of(span: ReadableSpan, parent: ReadableSpan) -> bool:
    assert span.parent is not None and span.context is not None and parent.context is not None, span.name
    return bool(span.parent.span_id == parent.context.span_id and span.context.trace_id == parent.context.trace_id)


def every_value(spans: tuple[ReadableSpan, ...]) -> str:
    return "\n".join(f"{s.name} {k}={v!r}" for s in spans for k, v in (s.attributes or {}).items())


async def test_one_mention_is_one_trace_from_the_slack_event_to_each_llm_and_tool_call(
    app: App, fake_openai: FakeOpenAI, settings: Settings, exporter: InMemorySpanExporter
) -> None:
    traced(exporter)
    ts = await one_mention(app, fake_openai)
    spans = exporter.get_finished_spans()

    [receipt] = by_name(spans, "slack.event app_mention")
    [job] = by_name(spans, "process ")
    [run] = by_name(spans, "invoke_agent ")
    chats, tools = by_name(spans, "chat "), by_name(spans, "execute_tool ")
    assert receipt.parent is None and receipt.kind is trace.SpanKind.SERVER
    assert child_of(job, receipt) and job.kind is trace.SpanKind.CONSUMER
    assert child_of(run, job)
    assert len(chats) == 2 and all(child_of(c, run) for c in chats)
    assert len(tools) == 1 and child_of(tools[0], run)
    assert len(spans) == 6, [s.name for s in spans]

    thread = f"-/T0001/C1/{ts}"
    assert dict(receipt.attributes or {}) == {"slack.event.type": "app_mention", "slack.event.id": "Ev123",
                                  "gen_ai.conversation.id": thread, "slack.team_id": "T0001", "slack.channel_id": "C1"}
    assert dict(job.attributes or {}) | {"messaging.message.id": ""} == {
        "messaging.system": "arq", "messaging.operation.type": "process", "agent.job.try": 1,
        "messaging.destination.name": settings.arq_queue_name, "messaging.message.id": ""}
    model = settings.openai_model
    first, second = sorted(chats, key=lambda s: s.start_time or 0)
    assert first.name == f"chat {model}" and first.kind is trace.SpanKind.CLIENT
    usage = second.attributes or {}
    assert usage["gen_ai.operation.name"] == "chat" and usage["gen_ai.provider.name"] == "openai"
    assert usage["gen_ai.request.model"] == model and usage["gen_ai.response.finish_reasons"] == ("stop",)
    assert usage["gen_ai.usage.input_tokens"] == 120 and usage["gen_ai.usage.output_tokens"] == 8
    # LLM_PRICE_PROMPT_PER_1M=1, LLM_PRICE_COMPLETION_PER_1M=2: 120 + 16 micro-dollars.
    assert usage["agent.cost_micros"] == 136 and usage["agent.cost_usd"] == pytest.approx(0.000136)
    assert (first.attributes or {})["gen_ai.response.finish_reasons"] == ("tool_calls",)
    [tool] = tools
    assert tool.name == "execute_tool calculator"
    assert tool.attributes is not None and tool.attributes["gen_ai.tool.name"] == "calculator"
    assert tool.attributes["agent.tool.outcome"] == "ok" and tool.attributes["gen_ai.tool.call.id"]
    totals = run.attributes or {}
    assert totals["gen_ai.conversation.id"] == thread and totals["agent.stop_reason"] == "final_answer"
    assert totals["agent.steps"] == 2
    assert totals["agent.cost_micros"] == sum((c.attributes or {})["agent.cost_micros"] for c in chats)  # type: ignore[misc]

    # No message text anywhere: not the question, the tool's arguments or result, nor the answer.
    values = every_value(spans)
    for said in ("17 times 23", "17*23", "391", "Multiplying"):
        assert said not in values


async def test_with_capture_content_the_spans_carry_the_messages(
    app: App, fake_openai: FakeOpenAI, exporter: InMemorySpanExporter
) -> None:
    traced(exporter, content=True)
    await one_mention(app, fake_openai)
    spans = exporter.get_finished_spans()
    first, second = sorted(by_name(spans, "chat "), key=lambda s: s.start_time or 0)
    [tool] = by_name(spans, "execute_tool ")
    assert QUESTION in str((first.attributes or {})["gen_ai.input.messages"])
    assert "Multiplying." in str((first.attributes or {})["gen_ai.output.messages"])
    assert "391" in str((second.attributes or {})["gen_ai.output.messages"])
    assert (tool.attributes or {})["gen_ai.tool.call.arguments"] == '{"expression": "17*23"}'
    assert (tool.attributes or {})["gen_ai.tool.call.result"] == "391"


async def test_a_failed_llm_call_is_an_error_span_naming_its_cause_and_not_the_provider_s_words(
    app: App, fake_openai: FakeOpenAI, exporter: InMemorySpanExporter
) -> None:
    traced(exporter)
    fake_openai.queue(error(503, "upstream overloaded while reading: what is 17 times 23?"))
    resp = await app.post_event(event_body(mention(text=f"<@UBOT> {QUESTION}")))
    assert resp.status == 200
    await app.drain()
    spans = exporter.get_finished_spans()
    [chat] = by_name(spans, "chat ")
    [run] = by_name(spans, "invoke_agent ")
    assert chat.status.status_code is trace.StatusCode.ERROR and chat.status.description is None
    assert (chat.attributes or {})["error.type"] == "server_error"
    assert (run.attributes or {})["agent.stop_reason"] == "error" and run.status.status_code is trace.StatusCode.ERROR
    assert "17 times 23" not in every_value(spans) and "overloaded" not in every_value(spans)
    assert all(not s.events for s in spans)  # no exception recorded with its message


def test_a_run_without_a_job_joins_its_mention_s_trace_and_an_unreadable_context_starts_one(
    exporter: InMemorySpanExporter,
) -> None:
    # A run a worker took over from a dead one (bot.queue.resume) has no job span: the turn's context links it.
    traced(exporter)
    conversation = Conversation(Workspace("T0001"), "C1", "1.0")
    with telemetry.receipt("app_mention", conversation, "Ev1"):
        parent = telemetry.traceparent()
    with telemetry.run(conversation, "run-1", parent):
        pass
    with telemetry.job("00-not-a-trace-context", "job-2", 1, "queue"):
        pass
    receipt, run, job = exporter.get_finished_spans()
    assert parent.startswith("00-") and child_of(run, receipt)
    assert job.parent is None and job.context is not None and receipt.context is not None
    assert job.context.trace_id != receipt.context.trace_id


def test_without_otel_settings_nothing_is_set_up(settings: Settings) -> None:
    assert telemetry.build(settings, "all", {}) is None
    with telemetry.tracing(settings, "all", {}):
        assert telemetry.traceparent() == ""
        assert engine_telemetry._tracer is None
        assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    for off in ({"OTEL_SDK_DISABLED": "true"}, {"OTEL_TRACES_EXPORTER": "none"}):
        on = settings.model_copy(update={"otel_exporter_otlp_endpoint": "http://127.0.0.1:4318"})
        assert telemetry.build(on, "all", off) is None


@pytest.mark.parametrize("environ", [
    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, {"OTEL_TRACES_EXPORTER": "otlp"},
])
def test_the_standard_otel_variables_turn_traces_on_with_the_service_and_role_named(
    settings: Settings, environ: dict[str, Any]
) -> None:
    provider = telemetry.build(settings, "worker", environ)
    assert provider is not None
    try:
        attributes = provider.resource.attributes
        assert attributes["service.name"] == "slack-agent" and attributes[telemetry.ROLE_ATTRIBUTE] == "worker"
    finally:
        provider.shutdown()


@pytest.mark.parametrize(("environ", "named"), [
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
])
def test_an_exporter_this_build_does_not_ship_is_one_clear_error(
    settings: Settings, environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        telemetry.build(settings, "web", environ)


def test_a_bad_endpoint_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        Settings(_env_file=None, otel_exporter_otlp_endpoint="collector:4318")


async def test_python_m_bot_exports_each_process_s_spans_over_otlp_as_one_trace(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    """The supervisor's web process and workers each set up their own exporter (after they started, as processes
    of their own), and the collector gets the mention's trace in pieces from two processes, joined by the job."""
    fake_openai.queue(tool_calls(("calculator", {"expression": "17*23"})), text(ANSWER))
    async with FakeCollector() as collector:
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": fake_slack.base_url,
            "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MAX_RETRIES": "0",
            "LLM_PRICE_PROMPT_PER_1M": "1", "LLM_PRICE_COMPLETION_PER_1M": "2", "SLACK_POSTS_PER_SECOND": "0",
            "SLACK_UPDATES_PER_MINUTE": "0", "HOST": "127.0.0.1", "PORT": str(free_port()),
            "WORKER_HEALTH_PORT": str(free_port()), "REDIS_URL": session_redis_url(), "REDIS_KEY_PREFIX": key_prefix,
            "ARQ_QUEUE_NAME": f"{key_prefix}:queue",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.base_url, "OTEL_SERVICE_NAME": "agent-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "50",  # the SDK's own batch setting: exported within 50 ms, not 5 s
        }
        async with BotProcess("all", env, tmp_path / "bot.log", argv=["--processes", "2"]) as bot:
            await bot.wait_healthy()
            body = event_body(mention(text=f"<@UBOT> {QUESTION}", ts=next_ts()))
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{bot.url}/slack/events", data=body,
                                     headers=signed_headers(SECRET, body)) as resp:
                    assert resp.status == 200

            def whole(spans: list[ExportedSpan]) -> bool:
                return sum(s.name.startswith("chat ") for s in spans) == 2 and any(
                    s.name.startswith("invoke_agent") for s in spans)

            spans = await collector.wait_for(whole)
            assert await bot.stop() == 0

    names = {s.name: s for s in spans}
    assert sorted(names) == sorted(["slack.event app_mention", f"process {key_prefix}:queue",
                                    "invoke_agent agent-under-test", "chat gpt-4o-mini", "execute_tool calculator"])
    assert len(spans) == 6  # one span per thing done: the two LLM calls, the one tool call (no second tool span)
    receipt, job = names["slack.event app_mention"], names[f"process {key_prefix}:queue"]
    run, tool = names["invoke_agent agent-under-test"], names["execute_tool calculator"]
    assert job.parent_span_id == receipt.span_id and run.parent_span_id == job.span_id
    assert tool.parent_span_id == run.span_id
    assert len({s.trace_id for s in spans}) == 1
    assert receipt.resource["slack_agent.role"] == "web"
    assert {s.resource["slack_agent.role"] for s in spans if s is not receipt} == {"worker"}
    assert receipt.resource["process.pid"] != run.resource["process.pid"]
    assert {s.resource["service.name"] for s in spans} == {"agent-under-test"}
    assert collector.content_types == {"application/x-protobuf"}
    assert QUESTION not in str([s.attributes for s in spans])


@pytest.mark.parametrize("name", ["OTEL_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"])
def test_message_text_is_asked_for_by_the_issue_s_name_or_opentelemetry_s(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    assert Settings(_env_file=None).otel_capture_content is False
    monkeypatch.setenv(name, "true")
    assert Settings(_env_file=None).otel_capture_content is True


async def test_without_capture_content_no_span_of_python_m_bot_quotes_a_call_s_arguments(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    """An MCP server's error quotes the call's argument (the mcp SDK puts it on its own span, under ours), and the
    model calls a tool it made up: exported, the spans hold names, ids, counts and outcomes only."""
    secret, invented = "hunter2-MARKERARG37", "steal_MARKERTOOL37"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"docs": {
        "command": sys.executable, "args": ["-m", "tests.fakes.mcp_http_server", "--stdio"], "cwd": str(ROOT)}}}))
    fake_openai.queue(tool_calls(("docs__lookup", {"query": secret}), (invented, {"q": secret})), text(ANSWER))
    async with FakeCollector() as collector:
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": fake_slack.base_url,
            "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MAX_RETRIES": "0",
            "LLM_PRICE_PROMPT_PER_1M": "1", "LLM_PRICE_COMPLETION_PER_1M": "2", "SLACK_POSTS_PER_SECOND": "0",
            "SLACK_UPDATES_PER_MINUTE": "0", "HOST": "127.0.0.1", "PORT": str(free_port()),
            "REDIS_URL": session_redis_url(), "REDIS_KEY_PREFIX": key_prefix, "ARQ_QUEUE_NAME": f"{key_prefix}:queue",
            "AGENT_MCP_CONFIG": str(config), "OTEL_EXPORTER_OTLP_ENDPOINT": collector.base_url,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        async with BotProcess("all", env, tmp_path / "bot.log", argv=["--processes", "1"]) as bot:
            await bot.wait_healthy()
            body = event_body(mention(text=f"<@UBOT> {QUESTION}", ts=next_ts()))
            async with aiohttp.ClientSession() as http, http.post(
                f"{bot.url}/slack/events", data=body, headers=signed_headers(SECRET, body)
            ) as resp:
                assert resp.status == 200

            def whole(spans: list[ExportedSpan]) -> bool:
                return any(s.name.startswith("invoke_agent") for s in spans)

            spans = await collector.wait_for(whole)
            assert await bot.stop() == 0

    names = {s.name: s for s in spans}
    mcp = names["MCP send tools/call lookup"]
    assert mcp.attributes["error.type"] == "-32602" and mcp.status_message == ""
    assert names["execute_tool docs__lookup"].attributes["agent.tool.outcome"] == "error"
    unknown = names["execute_tool unknown"]
    assert (unknown.attributes["gen_ai.tool.name"], unknown.attributes["agent.tool.outcome"]) == (
        "unknown", "unknown_tool")
    wire = "\n".join(s.wire for s in spans)
    assert "MARKERARG37" not in wire and "MARKERTOOL37" not in wire


def test_without_content_a_library_s_error_text_leaves_only_its_type() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(telemetry.without_content(exporter)))
    tracer = provider.get_tracer("some-library")  # a library's spans record exceptions with their messages
    with pytest.raises(ValueError), tracer.start_as_current_span("lib call", attributes={"lib.id": 7}) as span:
        span.set_status(trace.StatusCode.ERROR, "no page matches 'hunter2'")
        raise ValueError("bad query 'hunter2'")
    [span] = exporter.get_finished_spans()
    assert span.name == "lib call" and dict(span.attributes or {}) == {"lib.id": 7}
    assert span.status.status_code is trace.StatusCode.ERROR and span.status.description is None
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert events == [("exception", {"exception.type": "ValueError"})]
