"""Tracing overhead: CPU per step of 10-step ``agent_core.Agent`` runs with OpenTelemetry off and on.

The same runs as ``bench/loop_overhead.py`` (a fake LLM in its own process, answering at once), each inside a run
span as the worker makes one (``bot.telemetry.run``), in three modes, interleaved within each repetition:

- ``off``: no provider (the default): the hooks' one global read.
- ``on, spans dropped``: the SDK's provider and batch processor, an exporter that drops the batches (the cost of
  making the spans).
- ``on, OTLP encoded``: the same, its exporter encoding each batch to OTLP protobuf as the HTTP exporter does
  before posting it (everything but the network).

CPU is the process's (the batch processor's export thread included), over all the runs of a mode and a final flush,
divided by their steps. Message text is not captured (the default).

    python bench/otel_overhead.py [--runs 30] [--reps 3] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import fake_llm, summarize, write_json
from loop_overhead import STEPS, echo
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agent_core import Agent, AgentOptions, InMemoryBudget, InMemoryThreadStore, OpenAIChatLLM, RunRequest, price_for
from bot import telemetry
from bot.identity import Conversation, Workspace
from tools import InMemoryTraceSink, Registry

MODES = ("off", "on, spans dropped", "on, OTLP encoded")


class Dropping(SpanExporter):
    """Takes every batch and sends nothing; ``encode``: after encoding it as the OTLP/HTTP exporter would."""

    def __init__(self, *, encode: bool) -> None:
        self.encode = encode
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        if self.encode:
            self.bytes += len(encode_spans(spans).SerializePartialToString())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


async def measure(agent: Agent, mode: str, runs: int, rep: int) -> dict[str, float]:
    exporter = Dropping(encode=mode == "on, OTLP encoded")
    provider = TracerProvider(shutdown_on_exit=False) if mode != "off" else None
    if provider is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    telemetry.use(provider)
    conversation = Conversation(Workspace("T1"), "C1", "1.0")
    steps = 0
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(runs):
        with telemetry.run(conversation, f"run-{rep}-{mode}-{i}", ""):
            stopped = await agent.run(RunRequest("Echo things ten times.", thread=f"bench-{rep}-{mode}-{i}"))
            telemetry.run_finished(stopped)
        assert stopped.steps == STEPS, f"{mode}: {stopped.steps} steps"
        steps += stopped.steps
    if provider is not None:
        provider.force_flush()  # the export thread's work is counted too
    c1, w1 = time.process_time(), time.perf_counter()
    telemetry.use(None)
    if provider is not None:
        provider.shutdown()
        assert exporter.spans == runs * 2 * STEPS, exporter.spans  # a run span, 10 chats, 9 tool calls
    return {"cpu_ms_per_step": (c1 - c0) * 1000 / steps, "wall_ms_per_step": (w1 - w0) * 1000 / steps,
            "spans": exporter.spans, "otlp_bytes_per_step": exporter.bytes / steps}


async def main(runs: int, reps: int) -> dict[str, dict[str, object]]:
    with fake_llm(calls=STEPS, tool="echo") as (_, base):
        llm = OpenAIChatLLM(api_key="x", base_url=base, model="gpt-4o-mini", max_retries=0)
        agent = Agent(llm, Registry([echo]), AgentOptions(
            price=price_for("gpt-4o-mini"), secrets=("xoxb-not-a-real-token-123456",)),
            store=InMemoryThreadStore(), trace=InMemoryTraceSink(), budget=InMemoryBudget(10**12))
        await agent.run(RunRequest("Echo things ten times.", thread="warm-up"))
        found: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for rep in range(reps):
            for mode in MODES:
                found[mode].append(await measure(agent, mode, runs, rep))
        await agent.aclose()
    return {mode: {"cpu_ms_per_step": summarize([r["cpu_ms_per_step"] for r in rs]),
                   "wall_ms_per_step": summarize([r["wall_ms_per_step"] for r in rs]),
                   "otlp_bytes_per_step": rs[0]["otlp_bytes_per_step"]}
            for mode, rs in found.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = asyncio.run(main(10 if args.quick else args.runs, 1 if args.quick else args.reps))
    off = out["off"]["cpu_ms_per_step"]
    assert isinstance(off, dict)
    if args.json:
        write_json(args.json, {"what": f"CPU ms per step of {STEPS}-step runs, tracing off and on, fake LLM",
                               "steps_per_run": STEPS, "modes": out})
    print(f"{'tracing':22} {'CPU ms/step (median, min-max)':32} {'vs off':>8} wall ms/step  OTLP bytes/step",
          file=sys.stderr)
    for mode, r in out.items():
        cpu, wall = r["cpu_ms_per_step"], r["wall_ms_per_step"]
        assert isinstance(cpu, dict) and isinstance(wall, dict)
        more = cpu["median"] - off["median"]
        print(f"{mode:22} {cpu['median']:6.3f} ({cpu['min']:.3f}-{cpu['max']:.3f}){'':12} {more:+8.3f} "
              f"{wall['median']:11.3f}  {r['otlp_bytes_per_step']:.0f}", file=sys.stderr)
