"""The terminal's approver: a tool's approval or a guard question asked on the terminal (used when stdin is one).

    approver = TerminalApprover()          # reads the answer from stdin, prints the question to stdout
    await approver.approve("chat__send", {"to": "Ben"}, ctx)   # "Run chat__send …? [y/N]"

An empty line, end of input or anything but yes is a refusal (fail closed); for a guard question ``r`` approves the
destination for the rest of the run.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from tools import EgressAnswer, EgressRequest, ToolContext

_YES = frozenset({"y", "yes"})


class TerminalApprover:
    """Asks the person at the terminal; one question at a time."""

    def __init__(self, stdin: TextIO | None = None, out: TextIO | None = None) -> None:
        self._in = stdin or sys.stdin
        self._out = out or sys.stdout
        self._lock = asyncio.Lock()

    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        shown = json.dumps(dict(arguments), ensure_ascii=False)
        return await self._ask(f"? Run {tool} {shown}? [y/N] ") in _YES

    async def approve_egress(self, request: EgressRequest, ctx: ToolContext) -> EgressAnswer:
        where = request.destination or request.host
        answer = await self._ask(f"? {request.prompt()}\n  Approve? [y = once / r = {where} for this run / N] ")
        if answer in _YES:
            return EgressAnswer.ONCE
        return EgressAnswer.RUN if answer in ("r", "run") else EgressAnswer.DENY

    async def _ask(self, question: str) -> str:
        async with self._lock:
            print(question, end="", file=self._out, flush=True)
            line: str = await asyncio.to_thread(self._in.readline)
        return line.strip().lower()
