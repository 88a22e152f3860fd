"""A stateless fake Chat Completions server for benchmarks, run in its own process.

It answers a tool call while the request holds fewer than ``calls - 1`` tool results of the current run
(tool messages after the last user message), then a final text; after ``--delay`` seconds (0: at once).
Usage numbers are fixed so cost accounting has work to do. ``--tool calculator`` calls the built-in
calculator with a new expression each step (the service's real registry); ``echo`` the loop benchmark's tool.

    python bench/fake_llm.py PORT [--delay 0.2] [--calls 10] [--tool echo|calculator]

PORT 0 picks a free port; the first line printed is ``URL http://127.0.0.1:<port>/v1/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiohttp import web

STEPS = 10


def _done(messages: list[dict[str, object]]) -> int:
    """Tool results of the current run: after the last user message that is not a ReAct observation."""
    done = 0
    for m in reversed(messages):
        content = str(m.get("content", ""))
        if m.get("role") == "tool" or content.startswith("Observation:"):
            done += 1
        elif m.get("role") == "user":
            break
    return done


def make_app(*, delay: float, calls: int, tool: str) -> web.Application:
    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        done = _done(body["messages"])
        n = done + 1
        usage = {"prompt_tokens": 100 + 50 * n, "completion_tokens": 20, "total_tokens": 120 + 50 * n,
                 "prompt_tokens_details": {"cached_tokens": 0}}
        if done < calls - 1:
            if tool == "calculator":
                arguments = json.dumps({"expression": f"{n} * 7 + {n}"})
            else:
                arguments = json.dumps({"text": f"value {n}", "times": 3})
            message: dict[str, object] = {"role": "assistant", "content": f"Step {n}: {tool} it.", "tool_calls": [{
                "id": f"call_{n}", "type": "function", "function": {"name": tool, "arguments": arguments}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "All done."}
            finish = "stop"
        if delay > 0:
            await asyncio.sleep(delay)
        return web.json_response({
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "gpt-4o-mini"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage,
        })

    async def ping(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/", ping)
    return app


async def serve(port: int, delay: float, calls: int, tool: str) -> None:
    runner = web.AppRunner(make_app(delay=delay, calls=calls, tool=tool), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    print(f"URL http://127.0.0.1:{runner.addresses[0][1]}/v1/", flush=True)
    await asyncio.Event().wait()  # until the parent terminates this process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--calls", type=int, default=STEPS, help="LLM calls per run (the last one answers)")
    parser.add_argument("--tool", choices=["echo", "calculator"], default="echo")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.delay, args.calls, args.tool))


if __name__ == "__main__":
    main()
