"""A stateless fake Chat Completions server for benchmarks, run in its own process.

It answers at once: a tool call while the request holds fewer than ``STEPS - 1`` tool results, then a
final text. Usage numbers are fixed so cost accounting has work to do.
"""

from __future__ import annotations

import json
import sys

from aiohttp import web

STEPS = 10


async def completions(request: web.Request) -> web.Response:
    body = await request.json()
    done = sum(1 for m in body["messages"] if m.get("role") == "tool" or str(m.get("content", "")).startswith(
        "Observation:"))
    n = done + 1
    usage = {"prompt_tokens": 100 + 50 * n, "completion_tokens": 20, "total_tokens": 120 + 50 * n,
             "prompt_tokens_details": {"cached_tokens": 0}}
    if done < STEPS - 1:
        message = {"role": "assistant", "content": f"Step {n}: echo it.", "tool_calls": [{
            "id": f"call_{n}", "type": "function",
            "function": {"name": "echo", "arguments": json.dumps({"text": f"value {n}", "times": 3})}}]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "All done."}
        finish = "stop"
    return web.json_response({
        "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body.get("model", "gpt-4o-mini"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    })


def main() -> None:
    port = int(sys.argv[1])
    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
