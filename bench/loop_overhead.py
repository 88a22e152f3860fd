"""Loop overhead: CPU and wall time per step of 10-step runs against a fake LLM that answers at once.

Three loops in the same run, each against the same fake server (its own process, so its CPU is not
counted): a minimal hand-written loop on raw aiohttp, the same loop on the plain official ``openai``
client, and ``agent_core.Agent`` with every engine feature on (context assembly, token counting, cost and
budget accounting, stopper, tool validation, shaping, redaction, tracing, thread store).

    python bench/loop_overhead.py [--runs 30] [--reps 3] [--quick] [--json out.json]

Each repetition measures ``--runs`` runs of every loop; the report is the median of the repetitions' medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
from pydantic import BaseModel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import fake_llm, summarize, write_json

from agent_core import Agent, InMemoryBudget, InMemoryThreadStore, OpenAIChatLLM, RunRequest, price_for
from tools import InMemoryTraceSink, Registry, ToolContext, tool

STEPS = 10
TOOLS = [{"type": "function", "function": {"name": "echo", "description": "Echo a text.", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
    "required": ["text", "times"], "additionalProperties": False}}}]


class EchoArgs(BaseModel):
    text: str
    times: int


@tool(name="echo", description="Echo a text a number of times.")
async def echo(args: EchoArgs, ctx: ToolContext) -> str:
    return " ".join([args.text] * args.times)


async def raw_aiohttp_run(session: aiohttp.ClientSession, url: str) -> int:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."},
                                      {"role": "user", "content": "Echo things ten times."}]
    steps = 0
    while True:
        async with session.post(url, json={"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS},
                                headers={"Authorization": "Bearer x"}) as resp:
            data = await resp.json()
        steps += 1
        message = data["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return steps
        for call in message["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": " ".join([args["text"]] * 3)})


async def openai_run(client: openai.AsyncOpenAI) -> int:
    messages: list[Any] = [{"role": "system", "content": "You are helpful."},
                           {"role": "user", "content": "Echo things ten times."}]
    steps = 0
    while True:
        completion = await client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        steps += 1
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return steps
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": " ".join([args["text"]] * 3)})


async def measure(name: str, runs: int, one_run: Callable[[int], Awaitable[int]]) -> dict[str, float]:
    await one_run(-1)  # warm up: connections, imports, encodings
    cpu_per_step, wall_per_step = [], []
    for i in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        steps = await one_run(i)
        c1, w1 = time.process_time(), time.perf_counter()
        assert steps == STEPS, f"{name}: {steps} steps"
        cpu_per_step.append((c1 - c0) * 1000 / steps)
        wall_per_step.append((w1 - w0) * 1000 / steps)
    return {"cpu_ms_median": statistics.median(cpu_per_step), "cpu_ms_min": min(cpu_per_step),
            "cpu_ms_max": max(cpu_per_step), "wall_ms_median": statistics.median(wall_per_step)}


async def main(runs: int) -> dict[str, dict[str, float]]:
    with fake_llm(calls=STEPS, tool="echo") as (_, base):
        results: dict[str, dict[str, float]] = {}
        url = base + "chat/completions"
        async with aiohttp.ClientSession() as session:
            results["raw aiohttp loop"] = await measure("raw", runs, lambda i: raw_aiohttp_run(session, url))
        client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                    http_client=openai.DefaultAioHttpClient())
        results["plain openai client loop"] = await measure("openai", runs, lambda i: openai_run(client))
        await client.close()
        llm = OpenAIChatLLM(api_key="x", base_url=base, model="gpt-4o-mini", max_retries=0)
        store, trace = InMemoryThreadStore(), InMemoryTraceSink()
        agent = Agent(llm, Registry([echo]), price=price_for("gpt-4o-mini"), store=store, trace=trace,
                      budget=InMemoryBudget(10**12), secrets=["xoxb-not-a-real-token-123456"])

        async def agent_run(i: int) -> int:
            stopped = await agent.run(RunRequest("Echo things ten times.", thread=f"bench-{i}"))
            return stopped.steps

        results["agent_core.Agent (all features)"] = await measure("agent", runs, agent_run)
        await agent.aclose()
        return results


def repeat(reps: int, runs: int) -> dict[str, dict[str, object]]:
    """``reps`` repetitions, each in a fresh event loop; per loop the summary of the repetitions' medians."""
    outs = [asyncio.run(main(runs)) for _ in range(reps)]
    return {name: {"cpu_ms_per_step": summarize([o[name]["cpu_ms_median"] for o in outs]),
                   "wall_ms_per_step": summarize([o[name]["wall_ms_median"] for o in outs])}
            for name in outs[0]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = repeat(1 if args.quick else args.reps, 10 if args.quick else args.runs)
    if args.json:
        write_json(args.json, {"what": f"CPU and wall ms per step of {STEPS}-step runs, fake LLM answering at once",
                               "steps_per_run": STEPS, "loops": out})
    print(f"{'loop':38} {'CPU ms/step (median of reps, min-max)':40} wall ms/step", file=sys.stderr)
    for name, r in out.items():
        cpu, wall = r["cpu_ms_per_step"], r["wall_ms_per_step"]
        assert isinstance(cpu, dict) and isinstance(wall, dict)
        print(f"{name:38} {cpu['median']:6.2f} ({cpu['min']:.2f}-{cpu['max']:.2f}){'':22} {wall['median']:6.2f}",
              file=sys.stderr)
