"""A golden case: a Slack conversation, the data its tools may read, a judge on the outcome, and two recorded
trajectories (a good one and a bad one) a scripted model replays.

Cases are YAML files under ``evals/`` (``evals/cases/<category>/*.yaml``, ``evals/injection/*.yaml``), one case per
file or a list of them. Text may hold placeholders the harness fills per run, so concurrent runs never share data:

* ``{page:NAME}``: the URL of the case's page ``NAME`` (``setup.pages``), on the local page server;
* ``{attacker}``: a URL on the attacker's server (a host the run must never reach);
* ``{channel}``: the run's channel id (``<#{channel}>`` in a message).

A trajectory is a list of turns, each a list of steps: ``{call: {tool: {arg: value}}}`` (several keys: parallel
calls), ``{answer: text}`` or ``{refuse: text}`` (``message.refusal``), with an optional ``usage: {prompt: n,
completion: n}`` the fake endpoint reports (a costly call). Placeholders are filled as in the case's data.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: The categories of the golden set (the issue's list); the report groups by them.
Category = Literal[
    "arithmetic", "page", "restart", "files", "search", "mcp", "persona", "limits", "refusal", "injection",
    "long_answer",
]
PLACEHOLDER_RE = re.compile(r"\{(page:[a-z0-9_-]+|attacker|channel)\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlackMessage(_Strict):
    """A person's message: in the channel (``channel_history``), the thread, or a search hit (``slack_search``)."""

    user: str = "U2"
    text: str
    #: A search hit's channel (another channel than the run's: ``C...``); "" for the run's own channel.
    channel: str = ""


class CaseFile(_Strict):
    """A file Slack holds; a turn attaches it by name. ``pdf``: one string per page; ``text``: the bytes as UTF-8."""

    name: str
    text: str = ""
    pdf: list[str] = Field(default_factory=list)
    mimetype: str = ""

    @model_validator(mode="after")
    def _one_body(self) -> CaseFile:
        if bool(self.text) == bool(self.pdf):
            raise ValueError(f"file {self.name!r}: give exactly one of `text` or `pdf`")
        return self


class CannedAnswer(_Strict):
    """What the MCP server's ``tool`` answers when called with arguments that include ``args``."""

    tool: Literal["lookup_customer", "order_status", "open_tickets", "invite_user", "update_setting"]
    args: dict[str, Any] = Field(default_factory=dict)
    answer: str


class Setup(_Strict):
    #: The channel's instructions (``/agent-limits channel prompt``): a persona.
    channel_prompt: str = ""
    #: ``/agent-limits`` commands typed by an admin in the run's own workspace first (``max-steps 2``).
    limits: list[str] = Field(default_factory=list)
    history: list[SlackMessage] = Field(default_factory=list)
    thread: list[SlackMessage] = Field(default_factory=list)
    search: list[SlackMessage] = Field(default_factory=list)
    pages: dict[str, str] = Field(default_factory=dict)
    files: list[CaseFile] = Field(default_factory=list)
    mcp: list[CannedAnswer] = Field(default_factory=list)


class Turn(_Strict):
    #: What the person writes after the mention (placeholders allowed).
    say: str
    files: list[str] = Field(default_factory=list)
    user: str = "U1"


class Judge(_Strict):
    """One check on the outcome; every key set must hold. Strings compare case-insensitively."""

    answer_contains: list[str] = Field(default_factory=list)
    answer_any: list[str] = Field(default_factory=list)
    answer_not_contains: list[str] = Field(default_factory=list)
    answer_equals: str | None = None
    answer_matches: str | None = None
    #: A tool the run called (and that ran): ``{tool: name, args: {key: value}}``; values match as substrings.
    called: dict[str, Any] | None = None
    #: A tool that must not have run (with these arguments, when given).
    not_called: dict[str, Any] | None = None
    #: A file shared into the thread: ``{name: glob, contains: [text]}``.
    uploaded: dict[str, Any] | None = None
    #: No request reached the attacker's server.
    attacker_not_reached: bool = False
    stop_reason: str | list[str] | None = None
    #: The MCP server saw no call of this tool (the environment's own record).
    mcp_not_called: str | None = None

    @field_validator("answer_matches")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value


Step = dict[str, Any]


class Injection(_Strict):
    """What the attack tries (AgentDojo's shape: a goal planted in a vector), for the injection report."""

    vector: Literal["page", "file", "search", "mcp", "message"]
    goal: Literal["exfiltrate", "link", "invite", "schedule", "setting"]


class Case(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,60}$")
    category: Category
    title: str
    setup: Setup = Field(default_factory=Setup)
    turns: list[Turn] = Field(min_length=1, max_length=3)
    judge: list[Judge] = Field(min_length=1)
    good: list[list[Step]]
    bad: list[list[Step]]
    injection: Injection | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        for name, trajectory in (("good", self.good), ("bad", self.bad)):
            if len(trajectory) != len(self.turns):
                raise ValueError(f"`{name}` has {len(trajectory)} turn(s), the case {len(self.turns)}")
            for steps in trajectory:
                _check_steps(name, steps)
        files = {f.name for f in self.setup.files}
        for turn in self.turns:
            missing = set(turn.files) - files
            if missing:
                raise ValueError(f"a turn attaches {sorted(missing)} but setup.files has no such file")
        if self.category == "injection" and self.injection is None:
            raise ValueError("an injection case says what it tries: `injection: {vector, goal}`")
        return self

    @property
    def multi_turn(self) -> bool:
        return len(self.turns) > 1


def _check_steps(name: str, steps: list[Step]) -> None:
    if not steps or not {"answer", "refuse"} & set(steps[-1]):
        raise ValueError(f"each turn of `{name}` ends with an `answer` (or `refuse`) step")
    for step in steps:
        if set(step) - {"usage"} not in ({"call"}, {"answer"}, {"refuse"}):
            raise ValueError(f"a step of `{name}` is `call: {{tool: args}}`, `answer: text` or `refuse: text` (the "
                             f"model declines, as OpenAI sends it), got {sorted(step)}")
        if "call" in step and (not isinstance(step["call"], dict) or not step["call"]):
            raise ValueError(f"a `call` step of `{name}` maps tool names to their arguments")


class CaseError(ValueError):
    """A case file that cannot be read; the message names the file and what to change."""


def load_cases(root: Path, pattern: str = "*") -> list[Case]:
    """Every case under ``root`` whose id (or ``category/id``) matches the glob ``pattern``, sorted by id."""
    cases: dict[str, Case] = {}
    for path in sorted(root.rglob("*.yaml")):
        for case in _read(path):
            if case.id in cases:
                raise CaseError(f"{path}: case id {case.id!r} is used twice")
            cases[case.id] = case
    chosen = [c for c in cases.values() if _matches(c, pattern)]
    _check_unique_prompts(chosen)
    return sorted(chosen, key=lambda c: c.id)


def _matches(case: Case, pattern: str) -> bool:
    return any(fnmatch.fnmatch(name, p.strip()) for p in pattern.split(",") if p.strip()
               for name in (case.id, f"{case.category}/{case.id}"))


def _read(path: Path) -> Iterable[Case]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CaseError(f"{path}: not YAML: {exc}") from None
    items = raw if isinstance(raw, list) else [raw]
    for index, item in enumerate(items):
        try:
            yield Case.model_validate(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the case"
            raise CaseError(f"{path} (case #{index + 1}): {where}: {first['msg']}") from None


def _check_unique_prompts(cases: list[Case]) -> None:
    """The scripted model tells cases apart by what the person said: every turn's words must be unique."""
    seen: dict[str, str] = {}
    for case in cases:
        for turn in case.turns:
            if turn.say in seen:
                raise CaseError(f"cases {seen[turn.say]!r} and {case.id!r} both say {turn.say!r}: make it unique")
            seen[turn.say] = case.id
