"""Fake OpenTelemetry collector: OTLP/HTTP protobuf on loopback, keeping every span the service's processes export.

    async with FakeCollector() as collector:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.base_url
        ...
        spans = await collector.wait_for(lambda spans: any(s.name == "chat gpt-4o-mini" for s in spans))

Waiting is woken by each export the collector receives, never polled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ExportedSpan:
    """One span as it arrived, with the resource (the process) that sent it."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    #: The span's status message ("" for none).
    status_message: str = ""
    #: Everything the span carried (events, links, status...), as the collector's protobuf text.
    wire: str = ""


class FakeCollector:
    def __init__(self) -> None:
        self.spans: list[ExportedSpan] = []
        self.content_types: set[str] = set()
        self._arrived = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post(TRACES_PATH, self._export)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        self.content_types.add(request.content_type)
        body = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in body.resource_spans:
            resource = _values(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(
                    ExportedSpan(s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                                 _values(s.attributes), resource, s.status.message, str(s))
                    for s in scope_spans.spans
                )
        self._arrived.set()
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def wait_for(self, done: Callable[[list[ExportedSpan]], bool], *, timeout: float = 60) -> list[ExportedSpan]:
        """The spans received, once ``done`` holds for them (checked after each export)."""
        async with asyncio.timeout(timeout):
            while not done(self.spans):
                self._arrived.clear()
                await self._arrived.wait()
        return list(self.spans)


def _values(attributes: Any) -> dict[str, Any]:
    return {kv.key: _value(kv) for kv in attributes}


def _value(kv: KeyValue) -> Any:
    kind = kv.value.WhichOneof("value")
    if kind == "array_value":
        return tuple(getattr(v, v.WhichOneof("value") or "string_value") for v in kv.value.array_value.values)
    return getattr(kv.value, kind) if kind else None
