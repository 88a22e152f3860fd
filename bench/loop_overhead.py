"""Loop overhead: CPU and wall time per step of 10-step runs against a fake LLM that answers at once.

Five loops in the same run, each against the same fake server (its own process, so its CPU is not
counted): a minimal hand-written loop on raw aiohttp (also reading the stream, each network read split into
lines and each ``data:`` line parsed as it arrives: what streaming costs any loop), the same loop on the plain
official ``openai`` client, and ``agent_core.Agent`` with every engine feature on (context assembly, token
counting, cost and budget accounting, stopper, tool validation, shaping, redaction, tracing, thread store), once
with ``OPENAI_STREAM=false`` (one JSON body a call) and once streamed (the fake writes one server-sent event per
~4 characters of text and arguments, as OpenAI does: ~20 a step).

``--steps 10,50,200`` also measures the raw loops and both engine loops at each run length (the fake calls the
tool ``N - 1`` times, then answers), the lengths interleaved run by run in one process: a step's cost should
not grow with the run's length.

    python bench/loop_overhead.py [--runs 30] [--reps 3] [--quick] [--steps 10,50,200] [--json out.json]

Each repetition measures ``--runs`` runs of every loop (``--runs / 2`` runs of each length); the report is the
median of the repetitions' medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import openai
from pydantic import BaseModel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import fake_llm, summarize, write_json

from agent_core import (
    Agent,
    AgentOptions,
    InMemoryBudget,
    InMemoryThreadStore,
    Limits,
    OpenAIChatLLM,
    RunRequest,
    price_for,
)
from tools import InMemoryTraceSink, Registry, ToolContext, tool

STEPS = 10
TASK = "Echo things ten times."
RAW, RAW_STREAMED, OPENAI = "raw aiohttp loop", "raw aiohttp loop, streamed", "plain openai client loop"
AGENT, STREAMED = "agent_core.Agent (all features)", "agent_core.Agent, streamed (all features)"
TOOLS = [{"type": "function", "function": {"name": "echo", "description": "Echo a text.", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
    "required": ["text", "times"], "additionalProperties": False}}}]


class EchoArgs(BaseModel):
    text: str
    times: int


@tool(name="echo", description="Echo a text a number of times.")
async def echo(args: EchoArgs, ctx: ToolContext) -> str:
    return " ".join([args.text] * args.times)


async def raw_aiohttp_run(session: aiohttp.ClientSession, url: str, task: str = TASK) -> int:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."},
                                      {"role": "user", "content": task}]
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


async def _lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body's lines, each network read split at once (aiohttp's own line reader costs more per line)."""
    rest = b""
    async for data in resp.content.iter_any():
        *lines, rest = (rest + data).split(b"\n")
        for line in lines:
            yield line


async def raw_streamed_run(session: aiohttp.ClientSession, url: str, task: str = TASK) -> int:
    """The raw loop reading a stream, as simply as it can be done: each ``data:`` line parsed as it arrives."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."},
                                      {"role": "user", "content": task}]
    steps = 0
    while True:
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async with session.post(url, json={"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS,
                                           "stream": True}, headers={"Authorization": "Bearer x"}) as resp:
            async for line in _lines(resp):
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                for choice in json.loads(line[6:])["choices"]:
                    delta = choice["delta"]
                    if delta.get("content"):
                        content.append(delta["content"])
                    for call in delta.get("tool_calls") or ():
                        slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                        slot["id"] = call.get("id") or slot["id"]
                        slot["name"] = call.get("function", {}).get("name") or slot["name"]
                        slot["arguments"] += call.get("function", {}).get("arguments") or ""
        steps += 1
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in calls.values()]
        messages.append(message)
        if not calls:
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


async def measure(name: str, runs: int, one_run: Callable[[int], Awaitable[int]],
                  expected: int = STEPS) -> dict[str, float]:
    await one_run(-1)  # warm up: connections, imports, encodings
    cpu_per_step, wall_per_step = [], []
    for i in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        steps = await one_run(i)
        c1, w1 = time.process_time(), time.perf_counter()
        assert steps == expected, f"{name}: {steps} steps"
        cpu_per_step.append((c1 - c0) * 1000 / steps)
        wall_per_step.append((w1 - w0) * 1000 / steps)
    return {"cpu_ms_median": statistics.median(cpu_per_step), "cpu_ms_min": min(cpu_per_step),
            "cpu_ms_max": max(cpu_per_step), "wall_ms_median": statistics.median(wall_per_step)}


def make_agent(base: str, *, stream: bool, max_steps: int = 15) -> Agent:
    """``agent_core.Agent`` with every feature on."""
    llm = OpenAIChatLLM(api_key="x", base_url=base, model="gpt-4o-mini", max_retries=0, stream=stream)
    limits = Limits(max_steps=max_steps, max_tokens=10**9, max_cost_micros=10**12, max_seconds=600)
    return Agent(llm, Registry([echo]), AgentOptions(price=price_for("gpt-4o-mini"), limits=limits,
                 secrets=("xoxb-not-a-real-token-123456",)),
                 store=InMemoryThreadStore(), trace=InMemoryTraceSink(), budget=InMemoryBudget(10**15))


async def agent_run(agent: Agent, i: int, task: str = TASK) -> int:
    stopped = await agent.run(RunRequest(task, thread=f"bench-{i}"))
    return stopped.steps


async def measure_agent(base: str, runs: int, *, stream: bool) -> dict[str, float]:
    agent = make_agent(base, stream=stream)
    try:
        return await measure("agent, streamed" if stream else "agent", runs, lambda i: agent_run(agent, i))
    finally:
        await agent.aclose()


async def main(runs: int) -> dict[str, dict[str, float]]:
    with fake_llm(calls=STEPS, tool="echo", stream=True) as (_, base):
        results: dict[str, dict[str, float]] = {}
        url = base + "chat/completions"
        async with aiohttp.ClientSession() as session:
            results[RAW] = await measure("raw", runs, lambda i: raw_aiohttp_run(session, url))
            results[RAW_STREAMED] = await measure("raw, streamed", runs, lambda i: raw_streamed_run(session, url))
        client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                    http_client=openai.DefaultAioHttpClient())
        results[OPENAI] = await measure("openai", runs, lambda i: openai_run(client))
        await client.close()
        results[AGENT] = await measure_agent(base, runs, stream=False)
        results[STREAMED] = await measure_agent(base, runs, stream=True)
        return results


async def lengths_once(cycles: int, lengths: list[int]) -> dict[str, dict[str, dict[str, float]]]:
    """The raw loops and both engine loops at each run length, interleaved run by run against one fake (each
    run's task says its length), so a length's figure and another's share the machine's moment."""
    with fake_llm(calls=STEPS, tool="echo", stream=True) as (_, base):
        url = base + "chat/completions"
        plain, streamed = (make_agent(base, stream=s, max_steps=max(lengths) + 5) for s in (False, True))
        async with aiohttp.ClientSession() as session:
            loops: dict[str, Callable[[str, int], Awaitable[int]]] = {
                RAW: lambda task, i: raw_aiohttp_run(session, url, task),
                RAW_STREAMED: lambda task, i: raw_streamed_run(session, url, task),
                AGENT: lambda task, i: agent_run(plain, i, task),
                STREAMED: lambda task, i: agent_run(streamed, i, task),
            }
            for one_run in loops.values():
                await one_run(TASK, -1)  # warm up: connections, imports, encodings
            cpu: dict[tuple[int, str], list[float]] = {(n, name): [] for n in lengths for name in loops}
            wall: dict[tuple[int, str], list[float]] = {key: [] for key in cpu}
            for cycle in range(cycles):
                for n in lengths:
                    for name, one_run in loops.items():
                        c0, w0 = time.process_time(), time.perf_counter()
                        steps = await one_run(f"Echo things. [steps {n}]", cycle)
                        c1, w1 = time.process_time(), time.perf_counter()
                        assert steps == n, f"{name}: {steps} steps of {n}"
                        cpu[n, name].append((c1 - c0) * 1000 / n)
                        wall[n, name].append((w1 - w0) * 1000 / n)
        await plain.aclose()
        await streamed.aclose()
    return {str(n): {name: {"cpu_ms_median": statistics.median(cpu[n, name]),
                            "wall_ms_median": statistics.median(wall[n, name])} for name in loops}
            for n in lengths}


def _summaries(outs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, object]]:
    return {name: {"cpu_ms_per_step": summarize([o[name]["cpu_ms_median"] for o in outs]),
                   "wall_ms_per_step": summarize([o[name]["wall_ms_median"] for o in outs])}
            for name in outs[0]}


def repeat(reps: int, runs: int) -> dict[str, dict[str, object]]:
    """``reps`` repetitions, each in a fresh event loop; per loop the summary of the repetitions' medians."""
    return _summaries([asyncio.run(main(runs)) for _ in range(reps)])


def by_length(reps: int, runs: int, lengths: list[int]) -> dict[str, dict[str, dict[str, object]]]:
    """Per length, per loop: the summary of the repetitions' medians (``runs // 2`` cycles a repetition)."""
    outs = [asyncio.run(lengths_once(max(3, runs // 2), lengths)) for _ in range(reps)]
    return {str(n): _summaries([o[str(n)] for o in outs]) for n in lengths}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", default="", help="run lengths to compare, e.g. 10,50,200")
    parser.add_argument("--json")
    args = parser.parse_args()
    reps, runs = (1, 10) if args.quick else (args.reps, args.runs)
    out = repeat(reps, runs)
    lengths = [int(n) for n in args.steps.split(",") if n.strip()]
    long = by_length(reps, runs, lengths) if lengths else {}
    if args.json:
        write_json(args.json, {"what": f"CPU and wall ms per step of {STEPS}-step runs, fake LLM answering at once",
                               "steps_per_run": STEPS, "loops": out, "by_steps": long})
    for title, table in [(f"{STEPS} steps", out), *((f"{n} steps", t) for n, t in long.items())]:
        print(f"{title}: {'loop':42} {'CPU ms/step (median of reps, min-max)':40} ratio to raw  wall ms/step",
              file=sys.stderr)
        raw = table[RAW]["cpu_ms_per_step"]
        assert isinstance(raw, dict)
        for name, r in table.items():
            cpu, wall = r["cpu_ms_per_step"], r["wall_ms_per_step"]
            assert isinstance(cpu, dict) and isinstance(wall, dict)
            print(f"  {name:48} {cpu['median']:6.3f} ({cpu['min']:.3f}-{cpu['max']:.3f}){'':20} "
                  f"{cpu['median'] / raw['median']:5.2f}x  {wall['median']:6.2f}", file=sys.stderr)
