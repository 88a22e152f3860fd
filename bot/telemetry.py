"""Traces with OpenTelemetry: one slow run followed from the Slack event's receipt to the worker's LLM and tool calls.

Off unless the settings name an exporter: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
or ``OTEL_TRACES_EXPORTER=otlp``); ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` keep it off. Every
process sets up its own provider (``tracing``, in ``bot.__main__``): a supervisor's children are processes of their
own, and the SDK's export thread would not survive a fork. The SDK, its OTLP/HTTP exporter and the other standard
``OTEL_*`` variables (headers, sampler, batch sizes, resource attributes) are the official ones, read as the SDK
reads them. Off, nothing of the SDK is imported and each hook below is one global read.

The tree of one mention (``bot/receive`` → the job → the run → ``agent_core/telemetry.py``'s spans)::

    slack.event app_mention            web process, SERVER: claimed and enqueued; its W3C traceparent goes in the Turn
      process <queue>                  worker, CONSUMER: the arq job that runs the turn
        invoke_agent slack-agent       the run: tokens, cost, stop reason
          chat <model>                 each LLM call: model, tokens, cost, finish reason
          execute_tool <tool>          each tool call: name, call id, outcome

No message text is in any span unless ``OTEL_CAPTURE_CONTENT=true``; without it the exporter also takes out what
libraries' spans (the mcp SDK's) may quote from a call: status descriptions, exception messages (``without_content``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices, Field, field_validator

from agent_core import GENAI_PROVIDER, ConfigError, Stopped, StopReason, cost_attributes, use_tracer
from bot.identity import Conversation
from bot.settings_base import Role, SettingsPiece

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import SpanKind, Tracer

log = logging.getLogger(__name__)

#: The instrumentation scope of the service's spans.
SCOPE = "slack-agent"
#: The resource attribute naming the process's role (all, web, worker).
ROLE_ATTRIBUTE = "slack_agent.role"
#: The only wire format shipped (opentelemetry-exporter-otlp-proto-http).
PROTOCOL = "http/protobuf"

#: ``service.name`` of the traces when OTEL_SERVICE_NAME is not set.
DEFAULT_OTEL_SERVICE_NAME = "slack-agent"


class TelemetrySettings(SettingsPiece):
    """The kernel's traces piece: off unless an OTLP endpoint is named; the SDK reads the other OTEL_* variables."""

    otel_exporter_otlp_endpoint: str = Field(
        default="", description="OTLP/HTTP collector base URL (e.g. http://localhost:4318): traces on; empty: off."
    )
    otel_service_name: str = Field(
        default=DEFAULT_OTEL_SERVICE_NAME, min_length=1, description="service.name of every process's spans."
    )
    otel_capture_content: bool = Field(
        default=False,
        validation_alias=AliasChoices("otel_capture_content", "otel_instrumentation_genai_capture_message_content"),
        description="Put message text (prompts, answers, tool arguments and results) in spans.",
    )

    @field_validator("otel_exporter_otlp_endpoint")
    @classmethod
    def _otlp_url(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith(("http://", "https://")):
            raise ConfigError(f"OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL (OTLP/HTTP), "
                              f"got {value!r}")
        return value


_tracer: Tracer | None = None
_agent_name = SCOPE


def wanted(settings: TelemetrySettings, environ: Mapping[str, str]) -> bool:
    """Whether the settings ask for traces; ConfigError for an exporter or protocol this build does not ship."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if exporters - {"otlp", "none"}:
        raise ConfigError(f"OTEL_TRACES_EXPORTER={environ['OTEL_TRACES_EXPORTER']}: only otlp (or none) is supported")
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        if environ.get(name, PROTOCOL).strip().lower() != PROTOCOL:
            raise ConfigError(f"{name}={environ[name]}: only {PROTOCOL} is supported (the OTLP/HTTP exporter)")
    if "none" in exporters:
        return False
    return bool(settings.otel_exporter_otlp_endpoint or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                or "otlp" in exporters)


def build(settings: TelemetrySettings, role: Role, environ: Mapping[str, str]) -> TracerProvider | None:
    """This process's tracer provider exporting over OTLP/HTTP in batches, or None when traces are off."""
    if not wanted(settings, environ):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_EXPORTER_OTLP_ENDPOINT may come from .env, which the SDK does not read: given here as the SDK would
    # use it (the base URL + /v1/traces), unless the traces' own endpoint is set.
    base = settings.otel_exporter_otlp_endpoint
    endpoint = None if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or not base else (
        f"{base.removesuffix('/')}/v1/traces")
    resource = Resource.create({"service.name": settings.otel_service_name, ROLE_ATTRIBUTE: role,
                                "process.pid": os.getpid()})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=endpoint)
    provider.add_span_processor(BatchSpanProcessor(
        exporter if settings.otel_capture_content else without_content(exporter)))
    return provider


def without_content(exporter: SpanExporter) -> SpanExporter:
    """``exporter`` given every span without the words a failure may quote: a status's description and an event's
    attributes (an exception's message and stack) go, an exception's type stays. Our spans never record them, but
    libraries' do under ours: the mcp SDK's client span carries the server's error text, which quoted the call's
    arguments. Names, ids, counts and outcomes are kept."""
    from opentelemetry.sdk.trace.export import SpanExporter as _Base

    class _WithoutContent(_Base):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return exporter.export([_bare(s) for s in spans])

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return exporter.force_flush(timeout_millis)

    return _WithoutContent()


def _bare(span: ReadableSpan) -> ReadableSpan:
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Status

    events = [Event(e.name, {k: v for k, v in (e.attributes or {}).items() if k == "exception.type"}, e.timestamp)
              for e in span.events]
    return ReadableSpan(
        name=span.name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=span.attributes, events=events, links=span.links, kind=span.kind,
        status=Status(span.status.status_code), start_time=span.start_time, end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def use(provider: TracerProvider | None, *, content: bool = False, agent_name: str = SCOPE) -> None:
    """Spans from the service and the engine through ``provider`` from now on (None: off), with message text only
    when ``content``. Tests and benches hand in a provider of their own; ``tracing`` the configured one."""
    global _tracer, _agent_name
    _tracer = provider.get_tracer(SCOPE) if provider is not None else None
    _agent_name = agent_name
    use_tracer(provider.get_tracer("agent_core") if provider is not None else None, content=content)


@contextlib.contextmanager
def tracing(settings: TelemetrySettings, role: Role, environ: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Traces for the block when the settings ask for them: this process's provider, set up here and flushed and
    shut down at the end (the spans still in its batch are sent)."""
    provider = build(settings, role, environ)
    if provider is None:
        yield
        return
    from opentelemetry import trace

    trace.set_tracer_provider(provider)  # libraries' own spans too (the mcp SDK's), under ours
    use(provider, content=settings.otel_capture_content, agent_name=settings.otel_service_name)
    log.info("tracing on: spans of this %s process go to OTLP/HTTP%s", role,
             " with message text (OTEL_CAPTURE_CONTENT)" if settings.otel_capture_content else "")
    try:
        yield
    finally:
        use(None)
        provider.shutdown()


@contextlib.contextmanager
def receipt(event_type: str, conversation: Conversation, event_id: str) -> Iterator[None]:
    """The web side's span of one Slack event taken in (claimed and enqueued); ``traceparent()`` inside names it."""
    if _tracer is None:
        yield
        return
    from opentelemetry.trace import SpanKind

    with _span(_tracer, f"slack.event {event_type}", {
        "slack.event.type": event_type, "slack.event.id": event_id, **_where(conversation),
    }, kind=SpanKind.SERVER):
        yield


def traceparent() -> str:
    """The current span as a W3C ``traceparent`` for the job to carry ("" while off)."""
    if _tracer is None:
        return ""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


@contextlib.contextmanager
def job(parent: str, job_id: str, job_try: int, queue: str) -> Iterator[None]:
    """The worker's span of the arq job running a turn, a child of the receipt the turn's ``parent`` names."""
    if _tracer is None:
        yield
        return
    from opentelemetry.trace import SpanKind

    with _span(_tracer, f"process {queue}", {
        "messaging.system": "arq", "messaging.operation.type": "process", "messaging.destination.name": queue,
        "messaging.message.id": job_id, "agent.job.try": job_try,
    }, kind=SpanKind.CONSUMER, context=_carried(parent)):
        yield


@contextlib.contextmanager
def run(conversation: Conversation, run_id: str, parent: str) -> Iterator[None]:
    """A run's span: a child of its job's, or, for a run taken over from a dead worker (no job), of its receipt."""
    if _tracer is None:
        yield
        return
    from opentelemetry import trace

    context = None if trace.get_current_span().get_span_context().is_valid else _carried(parent)
    with _span(_tracer, f"invoke_agent {_agent_name}", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": _agent_name,
        "gen_ai.provider.name": GENAI_PROVIDER, "agent.run_id": run_id, **_where(conversation),
    }, context=context):
        yield


def run_finished(final: Stopped | None) -> None:
    """The run's end on its span (the current one): why it stopped, its steps, tokens and cost."""
    if _tracer is None or final is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import StatusCode

    span = trace.get_current_span()
    span.set_attributes({
        "agent.stop_reason": final.reason.value, "agent.steps": final.steps,
        "gen_ai.usage.input_tokens": final.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": final.usage.completion_tokens, **cost_attributes(final.usage),
    })
    if final.reason is StopReason.ERROR:
        span.set_attribute("error.type", final.reason.value)
        span.set_status(StatusCode.ERROR)


@contextlib.contextmanager
def _span(
    tracer: Tracer, name: str, attributes: dict[str, Any], *, kind: SpanKind | None = None,
    context: Context | None = None,
) -> Iterator[None]:
    """A current span that names a failure by its exception's type alone: the message may quote what must not leave
    the process (a user's words, a URL's credentials), and the SDK would copy it into the span."""
    from opentelemetry.trace import SpanKind, StatusCode

    with tracer.start_as_current_span(name, context=context, kind=kind or SpanKind.INTERNAL, attributes=attributes,
                                      record_exception=False, set_status_on_exception=False) as span:
        try:
            yield
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(StatusCode.ERROR)
            raise


def _where(conversation: Conversation) -> dict[str, Any]:
    return {"gen_ai.conversation.id": conversation.id, "slack.team_id": conversation.workspace.team_id,
            "slack.channel_id": conversation.channel_id}


def _carried(parent: str) -> Context | None:
    """The context a ``traceparent`` names (None for none, or one unreadable: the span starts a trace)."""
    if not parent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": parent})
