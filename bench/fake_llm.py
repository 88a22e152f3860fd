"""A stateless fake Chat Completions server for benchmarks, run in its own process.

It answers a tool call while the request holds fewer than ``calls - 1`` tool results of the current run
(tool messages after the last user message; ``[steps N]`` in the run's task sets ``calls`` for that run), then a
final text; after ``--delay`` seconds (0: at once).
Usage numbers are fixed so cost accounting has work to do. ``--tool calculator`` calls the built-in
calculator with a new expression each step (the service's real registry); ``echo`` the loop benchmark's tool.
With ``--stream``, a request that asks for ``stream`` is answered with server-sent events as OpenAI writes them:
one ``chat.completion.chunk`` per token-sized piece (about 4 characters) of the text and of the tool call's
arguments, each written on its own, then the finish, the usage chunk and ``[DONE]``; without it (or when the
request does not ask) one JSON body.

    python bench/fake_llm.py PORT [--delay 0.2] [--calls 10] [--tool echo|calculator] [--stream]

PORT 0 picks a free port; the first line printed is ``URL http://127.0.0.1:<port>/v1/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any

from aiohttp import web

STEPS = 10
_STEPS = re.compile(r"\[steps (\d+)\]")
#: Characters per streamed piece: about one token, as OpenAI streams.
PIECE_CHARS = 4


def _calls(messages: list[dict[str, object]], default: int) -> int:
    """The run's LLM calls: ``[steps N]`` in its task (the last user message that is no observation), else the
    default, so one fake serves runs of several lengths."""
    for m in reversed(messages):
        content = str(m.get("content", ""))
        if m.get("role") == "user" and not content.startswith("Observation:"):
            found = _STEPS.search(content)
            return int(found.group(1)) if found else default
    return default


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


def _pieces(text: str) -> list[str]:
    return [text[i:i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]


def _chunks(envelope: dict[str, object], message: dict[str, Any], finish: str,
            usage: dict[str, object]) -> list[dict[str, object]]:
    """``message`` as the chunks of a stream: the role, the text's pieces, each call's head and arguments' pieces,
    the finish, the usage."""
    deltas: list[dict[str, object]] = [{"role": "assistant", "content": "", "refusal": None}]
    deltas += [{"content": piece} for piece in _pieces(str(message.get("content") or ""))]
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        deltas.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                       "function": {"name": function["name"], "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                   for piece in _pieces(function["arguments"])]
    chunks: list[dict[str, object]] = [
        {**envelope, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
         "usage": None} for delta in deltas]
    chunks.append({**envelope, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
                   "usage": None})
    chunks.append({**envelope, "choices": [], "usage": usage})
    return chunks


async def _stream(request: web.Request, chunks: list[dict[str, object]]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    for chunk in chunks:
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def make_app(*, delay: float, calls: int, tool: str, stream: bool = False) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        done = _done(body["messages"])
        calls_this_run = _calls(body["messages"], calls)
        n = done + 1
        usage = {"prompt_tokens": 100 + 50 * n, "completion_tokens": 20, "total_tokens": 120 + 50 * n,
                 "prompt_tokens_details": {"cached_tokens": 0}}
        if done < calls_this_run - 1:
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
        envelope = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "gpt-4o-mini")}
        if stream and body.get("stream"):
            return await _stream(request, _chunks({**envelope, "object": "chat.completion.chunk"}, message, finish,
                                                  usage))
        return web.json_response({
            **envelope,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage,
        })

    async def ping(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/", ping)
    return app


async def serve(port: int, delay: float, calls: int, tool: str, stream: bool) -> None:
    runner = web.AppRunner(make_app(delay=delay, calls=calls, tool=tool, stream=stream), access_log=None)
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
    parser.add_argument("--stream", action="store_true", help="answer a request asking for stream with events")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.delay, args.calls, args.tool, args.stream))


if __name__ == "__main__":
    main()
