"""The world a case runs in: the fake Slack (its channel history, search index, files and users), the page
server, the attacker's server and the canned MCP server's data; each run in a workspace, channel and thread of
its own, so runs of many cases, models and tries share one service and never see each other's data.

The fakes are the tests' own (``tests/fakes``): real HTTP on loopback, reached by the app's real clients.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.cases import Case, CaseFile
from tests.fakes.pages import PageServer
from tests.fakes.slack_api import FakeFile, FakeSlack
from tests.tools.file_samples import pdf_bytes

#: The bot's own user id.
BOT_USER = "UBOT"
#: The canned MCP server's name: its tools reach the model as ``crm__<tool>``.
MCP_SERVER = "crm"
MCP_TOOLS = ("lookup_customer", "order_status", "open_tickets", "invite_user", "update_setting")
_PAGE_RE = re.compile(r"\{page:([a-z0-9_-]+)\}")
_MIMETYPES = {".pdf": "application/pdf", ".csv": "text/csv", ".txt": "text/plain", ".md": "text/markdown"}
_serial = itertools.count(1)


@dataclass(frozen=True)
class RunSpec:
    """One try of one case with one model (and one guard mode): its own workspace, channel and thread."""

    case: Case
    model: str
    attempt: int
    guard: str = "on"
    number: int = field(default_factory=lambda: next(_serial))

    @property
    def team(self) -> str:
        return f"TEV{self.number:05d}"

    @property
    def channel(self) -> str:
        return f"CEV{self.number:05d}"

    @property
    def asker(self) -> str:
        """The person who asks (a member of the run's workspace, as users.info says)."""
        return f"UEV{self.number:05d}"

    @property
    def admin(self) -> str:
        """A workspace admin of the run's workspace, who types its setup commands."""
        return f"UAD{self.number:05d}"

    def user(self, name: str) -> str:
        """A case's user id in this run: ``U1`` is the asker; the others are the same in every run."""
        return self.asker if name == "U1" else name

    @property
    def action_token(self) -> str:
        return f"eval-action-{self.number}"

    def ts(self, turn: int) -> str:
        """The ts of the person's message of ``turn`` (turn 0's is the thread's root)."""
        return f"1800000000.{self.number * 10 + turn:06d}"

    @property
    def root(self) -> str:
        return self.ts(0)


class World:
    """The fakes, started once for a whole evaluation."""

    def __init__(self, slack: FakeSlack, pages: PageServer, attacker: PageServer, folder: Path) -> None:
        self.slack, self.pages, self.attacker, self.folder = slack, pages, attacker, folder
        self.mcp_data = folder / "mcp.json"

    # --- placeholders

    def page_url(self, case: Case, name: str) -> str:
        return self.pages.url(f"/doc/{case.id}--{name}")

    def attacker_url(self, case: Case) -> str:
        return self.attacker.url(f"/{case.id}/collect")

    @property
    def attacker_host(self) -> str:
        return self.attacker.host_port

    def fill(self, case: Case, text: str, channel: str = "") -> str:
        text = _PAGE_RE.sub(lambda m: self.page_url(case, m.group(1)), text)
        return text.replace("{attacker}", self.attacker_url(case)).replace("{channel}", channel)

    def fill_value(self, case: Case, value: Any) -> Any:
        """Placeholders filled in every string of a JSON-like value."""
        if isinstance(value, str):
            return self.fill(case, value)
        if isinstance(value, dict):
            return {k: self.fill_value(case, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill_value(case, v) for v in value]
        return value

    # --- data a case's tools read

    def publish(self, cases: list[Case]) -> None:
        """Every case's pages on the page server and canned MCP answers in the server's data file."""
        canned = []
        for case in cases:
            for name, text in case.setup.pages.items():
                self.pages.docs[f"{case.id}--{name}"] = self.fill(case, text)
            canned += [self.fill_value(case, a.model_dump()) for a in case.setup.mcp]
        self.mcp_data.write_text(json.dumps(canned))

    def mcp_config(self) -> Path:
        """The ``AGENT_MCP_CONFIG`` file: the canned server, its tools never put to an approval by their own flags
        (the exfiltration guard still decides), as the injection suite adds its server."""
        path = self.folder / "mcp-config.json"
        server = {"command": sys.executable, "args": ["-m", "evalkit.canned_mcp"],
                  "cwd": str(Path(__file__).resolve().parents[1]), "env": {"EVAL_MCP_DATA": str(self.mcp_data)},
                  "tools": {name: {"approval": "never"} for name in MCP_TOOLS}}
        path.write_text(json.dumps({"mcpServers": {MCP_SERVER: server}}))
        return path

    def seed(self, run: RunSpec) -> None:
        """The run's channel history, thread, search index; its files are added per turn (``files_of``)."""
        case, slack = run.case, self.slack
        slack.users[run.asker] = {"team_id": run.team, "tz": "Europe/Paris"}
        slack.users[run.admin] = {"team_id": run.team, "is_admin": True}
        setup = case.setup
        slack.history[run.channel] = [
            {"type": "message", "user": m.user, "text": self.fill(case, m.text, run.channel), "ts": run.ts(i + 5)}
            for i, m in reversed(list(enumerate(setup.history)))]
        slack.replies[(run.channel, run.root)] = [
            {"type": "message", "user": m.user, "text": self.fill(case, m.text, run.channel),
             "ts": f"{run.root[:-1]}{i + 1}", "thread_ts": run.root} for i, m in enumerate(setup.thread)]
        slack.search.action_tokens.add(run.action_token)
        slack.search.scoped[run.action_token] = [
            {"author_user_id": m.user, "team_id": run.team, "channel_id": m.channel or run.channel,
             "message_ts": f"1700000000.{i:06d}", "content": self.fill(case, m.text, run.channel),
             "is_author_bot": False, "permalink": f"https://example.slack.com/archives/{m.channel}/p{i}"}
            for i, m in enumerate(setup.search)]

    def files_of(self, run: RunSpec, turn: int) -> list[dict[str, Any]]:
        """The ``files[]`` of the turn's message: each named file added to the fake Slack under a fresh id."""
        wanted = run.case.turns[turn].files
        entries = []
        for index, file in enumerate(f for f in run.case.setup.files if f.name in wanted):
            data = _file_bytes(file, lambda t: self.fill(run.case, t))
            fake = FakeFile(f"FEV{run.number:05d}{turn}{index}", file.name, data, _mimetype(file), team=run.team)
            entries.append(self.slack.add_file(fake))
        return entries

    def attacker_requests(self, case: Case) -> int:
        return sum(1 for path, _ in self.attacker.requests if path.startswith(f"/{case.id}/"))


def _mimetype(file: CaseFile) -> str:
    return file.mimetype or _MIMETYPES.get(Path(file.name).suffix.lower(), "application/octet-stream")


def _file_bytes(file: CaseFile, fill: Any) -> bytes:
    if file.pdf:
        return pdf_bytes([fill(page) for page in file.pdf])
    return str(fill(file.text)).encode()


@asynccontextmanager
async def world(folder: Path) -> AsyncIterator[World]:
    """The fakes on free loopback ports, closed at the end."""
    async with AsyncExitStack() as stack:
        slack = await stack.enter_async_context(FakeSlack(bot_user_id=BOT_USER))
        pages = await stack.enter_async_context(PageServer())
        attacker = await stack.enter_async_context(PageServer())
        yield World(slack, pages, attacker, folder)
