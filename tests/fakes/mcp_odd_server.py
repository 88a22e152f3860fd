"""A stdio MCP server that misbehaves on purpose, in raw JSON-RPC (the SDK's server would not let it).

    python -m tests.fakes.mcp_odd_server            # the tools below
    python -m tests.fakes.mcp_odd_server --silent   # reads its stdin, never answers (a server that hangs at start)

Tools: ``echo``; ``hologram`` (a content type from a newer spec); ``blobs`` (base64 inside
``structuredContent``); ``tasked`` (``taskSupport: required``);
``garbage`` (writes ``lines`` non-JSON lines on stdout, then answers); ``die`` (starts a child that keeps
stdout open, then exits mid-call); ``spawn`` (starts two sleeping children, which stay when the server exits
at stdin's end; the answer is ``server <pid>, children <pid>,<pid>``); ``hang`` (says "odd: hanging" on
stderr, then never answers); ``ask_model`` (asks the client for ``sampling/createMessage``
and answers with what came back).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from typing import Any

_SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
_OBJECT = {"type": "object"}
TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "description": "Repeat the text.", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "hologram", "description": "A result from a newer spec.", "annotations": {"readOnlyHint": True},
     "inputSchema": _OBJECT},
    {"name": "tasked", "description": "Runs only as a task.", "inputSchema": _OBJECT,
     "execution": {"taskSupport": "required"}, "annotations": {"readOnlyHint": True}},
    {"name": "garbage", "description": "Noise on stdout.", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {"lines": {"type": "integer"}}}},
    {"name": "die", "description": "Exit mid-call.", "annotations": {"readOnlyHint": True}, "inputSchema": _OBJECT},
    {"name": "spawn", "description": "Start children.", "annotations": {"readOnlyHint": True},
     "inputSchema": _OBJECT},
    {"name": "blobs", "description": "Binary inside structured content.", "annotations": {"readOnlyHint": True},
     "inputSchema": _OBJECT},
    {"name": "hang", "description": "Never answers.", "annotations": {"readOnlyHint": True},
     "inputSchema": _OBJECT},
    {"name": "ask_model", "description": "Ask for sampling.", "annotations": {"readOnlyHint": True},
     "inputSchema": _OBJECT},
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(request_id: Any, value: str) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": value}]}})


def call(request_id: Any, name: str, args: dict[str, Any]) -> None:
    if name == "echo":
        text(request_id, str(args.get("text", "")))
    elif name == "hologram":
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "hologram", "frames": 3}]}})
    elif name == "blobs":
        payload = base64.b64encode(bytes(range(256)) * 12).decode()  # 3,072 bytes
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [], "structuredContent": {
            "title": "Report", "attachment": {"mimeType": "application/pdf", "blob": payload},
            "preview": f"data:image/png;base64,{payload}"}}})
    elif name == "tasked":
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "call it as a task"}})
    elif name == "garbage":
        for i in range(int(args.get("lines", 1))):
            sys.stdout.write(f"debug: step {i} {{not json\n")
        text(request_id, "after the noise")
    elif name == "die":
        subprocess.Popen(_SLEEPER)  # inherits stdout: the pipe stays open after this process is gone
        os._exit(3)
    elif name == "spawn":
        children = [subprocess.Popen(_SLEEPER, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
                    for _ in range(2)]
        text(request_id, f"server {os.getpid()}, children {','.join(str(c.pid) for c in children)}")
    elif name == "hang":
        print("odd: hanging", file=sys.stderr, flush=True)
        time.sleep(600)  # answers nothing more, until killed
    elif name == "ask_model":
        send({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
              "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                         "maxTokens": 10}})
        answer = json.loads(sys.stdin.readline())
        text(request_id, json.dumps(answer.get("error") or answer.get("result")))


def main() -> None:
    silent = "--silent" in sys.argv
    for line in sys.stdin:
        message = json.loads(line)
        if silent or "id" not in message or "method" not in message:
            continue
        method, request_id, params = message["method"], message["id"], message.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": "odd", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            call(request_id, params["name"], params.get("arguments") or {})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
