"""Loop overhead: CPU and wall time per step of 10-step runs against a fake LLM that answers at once.

Three loops in the same run, each against the same fake server (its own process, so its CPU is not
counted): a minimal hand-written loop on raw aiohttp, the same loop on the plain official ``openai``
client, and ``agent_core.Agent`` with every engine feature on (context assembly, token counting, cost and
budget accounting, stopper, tool validation, shaping, redaction, tracing, thread store).

    python bench/loop_overhead.py [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
from pydantic import BaseModel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent_core import Agent, InMemoryBudget, InMemoryThreadStore, OpenAIChatLLM, price_for
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    port = free_port()
    server = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "fake_llm.py"), str(port)])
    base = f"http://127.0.0.1:{port}/v1/"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/"):
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            results: dict[str, dict[str, float]] = {}
            url = base + "chat/completions"
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
            stopped = await agent.run("Echo things ten times.", thread=f"bench-{i}")
            return stopped.steps

        results["agent_core.Agent (all features)"] = await measure("agent", runs, agent_run)
        await agent.aclose()
        return results
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    out = asyncio.run(main(args.runs))
    print(f"{'loop':38} {'CPU ms/step (median, min-max)':32} wall ms/step")
    for name, r in out.items():
        print(f"{name:38} {r['cpu_ms_median']:6.2f} ({r['cpu_ms_min']:.2f}-{r['cpu_ms_max']:.2f}){'':14} "
              f"{r['wall_ms_median']:6.2f}")
