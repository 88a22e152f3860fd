"""Time to the first visible token: the first AnswerDelta, against the final answer, streaming on and off.

The fake endpoint (tests/fakes/openai_server.py) writes a scripted answer of ``--pieces`` pieces, one every
``--seconds / --pieces`` seconds, so the whole answer takes about 2 s, as a model writing ~50 tokens/s would;
with streaming off the same answer comes as one body after those 2 s. Cases:

- ``off``: ``OPENAI_STREAM=false``; the first visible text is the final answer.
- ``on, no tools``: streaming, the run offers no tools, so all text is the answer from the first piece.
- ``on, tools``: streaming with tools offered: text is held until it is clearly more than the one-line reason
  written before a tool call (agent_core/steps/deltas.py, ``TOOLS_HOLD_CHARS``).
- ``on, react``: text ReAct; the answer starts after ``Thought: ...`` and ``Final Answer:``.

    python bench/first_token.py [--reps 5] [--seconds 2] [--pieces 40] [--json out.json]

Times are from the start of the run (``Agent.events``) on the engine's side, the median of ``--reps`` runs.
It also gives the engine's CPU per LLM call for the same answer sent at once (``--calls`` calls, the fake in its
own process so that its CPU is not counted): what reading the stream costs over one JSON body.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any, Literal

from pydantic import BaseModel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import fake_process, summarize, write_json

from agent_core import (
    Agent,
    AgentOptions,
    AnswerDelta,
    FinalAnswer,
    Limits,
    OpenAIChatLLM,
    RunRequest,
    Stopped,
    StopReason,
    price_for,
)
from tests.fakes.openai_server import FakeOpenAI, streamed, text
from tools import Registry, ToolContext, tool

# About 400 characters of one paragraph, written in equal pieces.
ANSWER = ("The quarterly numbers look steady: revenue rose four percent on the last quarter, costs stayed flat, "
          "and the two new regions brought in most of the growth. Churn fell slightly, mostly in the small "
          "business segment, while support tickets per customer went down after the new onboarding flow. The "
          "main risk is the supplier contract that renews next month; the team suggests locking in the price now.")


class NoArgs(BaseModel):
    pass


@tool(name="noop", description="Does nothing.")
async def noop(args: NoArgs, ctx: ToolContext) -> str:
    return ""


Case = tuple[str, bool, bool, Literal["tools", "react"]]  # name, stream, tools offered, protocol
CASES: list[Case] = [
    ("off", False, True, "tools"),
    ("on, no tools", True, False, "tools"),
    ("on, tools", True, True, "tools"),
    ("on, react", True, True, "react"),
]


async def one_run(fake: FakeOpenAI, case: Case, seconds: float, pieces: int) -> dict[str, float]:
    _, stream, tools_offered, protocol = case
    content = f"Thought: I can answer from the report.\nFinal Answer: {ANSWER}" if protocol == "react" else ANSWER
    fake.queue(streamed(text(content), pieces=pieces, chunk_delay=seconds / pieces))
    llm = OpenAIChatLLM(api_key="bench", base_url=fake.base_url, model="gpt-4o-mini", max_retries=0, stream=stream)
    registry = Registry([noop]) if tools_offered else Registry([])
    agent = Agent(llm, registry, AgentOptions(price=price_for(llm.model), limits=Limits(), protocol=protocol))
    first: float | None = None
    final = 0.0
    started = time.perf_counter()
    try:
        async for event in agent.events(RunRequest("Summarize the quarterly report.")):
            now = time.perf_counter() - started
            if isinstance(event, AnswerDelta) and first is None:
                first = now
            elif isinstance(event, FinalAnswer):
                final = now
            elif isinstance(event, Stopped) and event.reason is not StopReason.FINAL_ANSWER:
                raise SystemExit(f"run stopped with {event.reason}: {event.detail}")
    finally:
        await agent.aclose()
    return {"first_visible_s": first if first is not None else final, "final_answer_s": final}


async def cpu_per_call(url: str, stream: bool, calls: int) -> float:
    """Engine CPU (ms) per streamed or plain call of the answer, the fake answering at once."""
    llm = OpenAIChatLLM(api_key="bench", base_url=url, model="gpt-4o-mini", max_retries=0, stream=stream)
    agent = Agent(llm, Registry([]), AgentOptions(price=price_for(llm.model), limits=Limits()))
    try:
        await agent.run(RunRequest("warm up"))
        started = time.process_time()
        for _ in range(calls):
            await agent.run(RunRequest("Summarize the quarterly report."))
        return (time.process_time() - started) * 1000 / calls
    finally:
        await agent.aclose()


async def serve(pieces: int) -> None:
    """The fake for the CPU figure, in its own process: the answer in ``pieces`` chunks, at once."""
    async with FakeOpenAI() as fake:
        fake.script = lambda request: streamed(text(ANSWER, prompt_tokens=90, completion_tokens=80), pieces=pieces)
        print(f"URL {fake.base_url}", flush=True)
        await asyncio.Event().wait()


async def main_async(reps: int, seconds: float, pieces: int) -> dict[str, Any]:
    async with FakeOpenAI() as fake:
        await one_run(fake, CASES[2], 0.05, 5)  # warm-up: connection, token counter, imports
        results: dict[str, Any] = {}
        for case in CASES:
            runs = [await one_run(fake, case, seconds, pieces) for _ in range(reps)]
            results[case[0]] = {key: summarize([r[key] for r in runs]) for key in runs[0]}
    return {"answer_seconds": seconds, "pieces": pieces, "answer_chars": len(ANSWER), "cases": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--pieces", type=int, default=40)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="2 repetitions")
    parser.add_argument("--json", default=None)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.pieces))
        return 0
    reps = 2 if args.quick else args.reps
    data = asyncio.run(main_async(reps, args.seconds, args.pieces))
    with fake_process([os.path.abspath(__file__), "--serve", "--pieces", str(args.pieces)]) as (_, url):
        data["cpu_ms_per_call"] = {
            mode: summarize([asyncio.run(cpu_per_call(url, mode == "stream", args.calls)) for _ in range(reps)])
            for mode in ("plain", "stream")
        }
    for name, r in data["cases"].items():
        print(f"{name:14s} first visible {r['first_visible_s']['median']:.3f} s  "
              f"final answer {r['final_answer_s']['median']:.3f} s")
    for mode, r in data["cpu_ms_per_call"].items():
        print(f"engine CPU per call, {mode:6s} {r['median']:.3f} ms (min {r['min']:.3f}, max {r['max']:.3f})")
    write_json(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
