"""MCP overhead: milliseconds one tool call through the executor takes over stdio and Streamable HTTP,
against the same call to a built-in tool (in-process ``echo``).

All three run the same tool (``echo``, read-only) through the real ``Executor``: lookup, validation,
run, redaction, shaping, tracing. The MCP servers are the test server (``tests/fakes/mcp_http_server.py``,
the mcp SDK's server side) in its own process, so the figure is the client + protocol + server cost.

    python bench/mcp_overhead.py [--calls 300] [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

from pydantic import BaseModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.tools.mcp_helpers import HttpServer, connected, http_entry, stdio_fake  # noqa: E402
from tools import Executor, Registry, ToolContext, tool  # noqa: E402


class EchoArgs(BaseModel):
    text: str
    times: int = 1


@tool()
async def echo(args: EchoArgs, ctx: ToolContext) -> str:
    """Repeat the text."""
    return " ".join([args.text] * args.times)


async def per_call_ms(executor: Executor, name: str, calls: int) -> float:
    ctx = ToolContext(run_id="bench", step=1, task="echo")
    samples = []
    for i in range(calls):
        t0 = time.perf_counter()
        result = await executor.execute(executor.prepare(name, {"text": f"hi {i}", "times": 2}, call_id="c"), ctx)
        samples.append((time.perf_counter() - t0) * 1000)
        assert result.ok, result.text
    return statistics.median(samples)


async def measure(calls: int, reps: int) -> dict[str, Any]:
    http = HttpServer()
    await http.start()
    try:
        async with connected({"local": stdio_fake(), "remote": http_entry(http)}) as servers:
            executor = Executor(servers.registry(Registry([echo])))
            runs: dict[str, list[float]] = {"builtin": [], "stdio": [], "http": []}
            for _ in range(reps):
                for label, name in (("builtin", "echo"), ("stdio", "local__echo"), ("http", "remote__echo")):
                    runs[label].append(await per_call_ms(executor, name, calls))
    finally:
        await http.stop()
    median = {label: statistics.median(values) for label, values in runs.items()}
    return {
        "calls": calls,
        "reps": reps,
        "median_ms_per_call": median,
        "added_ms_per_call": {k: median[k] - median["builtin"] for k in ("stdio", "http")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    os.chdir(ROOT)  # the servers start as ``python -m tests.fakes...``
    result = asyncio.run(measure(args.calls, args.reps))
    m, added = result["median_ms_per_call"], result["added_ms_per_call"]
    print(f"built-in echo: {m['builtin']:.3f} ms/call")
    print(f"MCP stdio:     {m['stdio']:.3f} ms/call (+{added['stdio']:.3f} ms)")
    print(f"MCP HTTP:      {m['http']:.3f} ms/call (+{added['http']:.3f} ms)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
