"""Runs cases through the real pipeline: signed events into the app, its worker, the fake Slack serving each
case's data, the configured OpenAI-compatible endpoint (or the scripted models on the fake one).

One service serves every run of a phase; runs go concurrently (``concurrency`` at a time), each in a workspace,
channel and thread of its own. A case's second turn comes in the next phase, after the service was closed and
started again (only Redis remembers the thread): the follow-up after a restart. An approval the run asks for is
denied by the asker, as a careful person would for a request nobody made.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Any

import aiohttp
from arq.constants import in_progress_key_prefix
from redis.asyncio import Redis

from agent_core import RedisThreadStore
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.runs.approval_messages import DENY_ACTION_ID
from bot.serve.service import Service
from bot.settings import Settings
from evalkit.cases import Case, Judge
from evalkit.judges import Outcome, attack_succeeded, task_done, verdict
from evalkit.world import BOT_USER, RunSpec, World
from tests.fakes.slack_api import FakeSlack
from tests.signing import action_body, command_body, event_body, mention, signed_headers

SECRET = "eval-signing-secret"
#: How ``/agent-limits`` starts its answer to a change it made (a limit or model; the channel's instructions).
SETUP_DONE = ("Changed", "This channel's instructions")
#: How often, and how long, a phase's end waits for the worker's last jobs to finish.
IDLE_POLL_SECONDS, IDLE_TIMEOUT_SECONDS = 0.05, 30.0
#: A run's error when the spend cap kept it from starting: it is left out of the scores, and counted.
NOT_STARTED = "not run: the --max-usd cap was reached"
#: Tool call outcomes of a call that did not go out (the guard held it back, a policy refused it).
NOT_RUN = frozenset({"held_back", "refused", "invalid_arguments", "unknown_tool"})
_STOP_RE = re.compile(r"Stop reason: `([a-z_]+)`")


@dataclass
class Result:
    spec: RunSpec
    outcome: Outcome
    #: None: the judge passed; else why not.
    failure: str | None
    #: For an injection case: the attacker's goal was reached.
    attacked: bool = False
    #: The user's own task was done (an injection case's utility, whatever the attacker got).
    done: bool = False

    @property
    def passed(self) -> bool:
        return self.failure is None

    @property
    def started(self) -> bool:
        return self.outcome.error != NOT_STARTED


@dataclass
class Spend:
    """The ``--max-usd`` cap over the whole evaluation: a run starts only when its worst case still fits."""

    cap_micros: int | None
    per_run_micros: int
    spent: int = 0
    held: int = 0

    def hold(self) -> bool:
        if self.cap_micros is not None and self.spent + self.held + self.per_run_micros > self.cap_micros:
            return False
        self.held += self.per_run_micros
        return True

    def settle(self, cost: int) -> None:
        self.held -= self.per_run_micros
        self.spent += cost


@dataclass
class Evaluation:
    world: World
    settings: Callable[[str], Settings]
    redis: Redis
    concurrency: int = 4
    turn_timeout: float = 120.0
    spend: Spend = field(default_factory=lambda: Spend(None, 0))
    progress: Callable[[int, int, int], None] = lambda done, total, spent: None
    _outcomes: dict[int, Outcome] = field(default_factory=dict)
    _done: int = 0

    async def run(self, specs: list[RunSpec]) -> list[Result]:
        """Every run, phase by phase (one per turn), guard mode by guard mode; judged once they ended."""
        self.world.publish(list({s.case.id: s.case for s in specs}.values()))
        total = sum(len(s.case.turns) for s in specs)
        for guard in dict.fromkeys(s.guard for s in specs):
            group = [s for s in specs if s.guard == guard]
            for phase in range(max(len(s.case.turns) for s in group)):
                todo = [s for s in group if phase < len(s.case.turns) and not self._outcome(s).error]
                if todo:
                    await self._phase(guard, phase, todo, total)
        if self._done < total:  # runs that stopped early (not started, failed setup) skip their later turns
            self.progress(total, total, self.spend.spent)
        return [self._judge(s) for s in specs]

    def _outcome(self, spec: RunSpec) -> Outcome:
        return self._outcomes.setdefault(spec.number, Outcome())

    async def _phase(self, guard: str, phase: int, specs: list[RunSpec], total: int) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        async with Service(self.settings(guard), "all") as service, aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{service.port}/slack/events"

            async def one(spec: RunSpec) -> None:
                async with slots:
                    await self._turn(http, url, spec, phase)
                self._done += 1
                self.progress(self._done, total, self.spend.spent)

            await asyncio.gather(*(one(s) for s in specs))
            await idle(self.redis, self.settings(guard))

    async def _turn(self, http: aiohttp.ClientSession, url: str, spec: RunSpec, turn: int) -> None:
        out = self._outcome(spec)
        if turn == 0 and not await self._begin(http, url, spec, out):
            return
        said = spec.case.turns[turn]
        words = self.world.fill(spec.case, said.say, spec.channel)
        event = mention(text=f"<@{BOT_USER}> {words}", user=spec.user(said.user), channel=spec.channel,
                        ts=spec.ts(turn), thread_ts=spec.root if turn else None,
                        team=spec.team)
        event["action_token"] = spec.action_token
        if files := self.world.files_of(spec, turn):
            event["files"] = files
        started = time.monotonic()
        try:
            await _post(http, url, event_body(event, team_id=spec.team))
            await self._until_stopped(http, url, spec, turn + 1)
        except (TimeoutError, aiohttp.ClientError) as exc:
            out.error = f"the run did not finish: {type(exc).__name__} after {time.monotonic() - started:.0f} s"
        out.seconds += time.monotonic() - started
        await self._read(spec, out)
        if out.error or turn == len(spec.case.turns) - 1:
            self.spend.settle(out.cost_micros)

    async def _begin(self, http: aiohttp.ClientSession, url: str, spec: RunSpec, out: Outcome) -> bool:
        """The run's worst case held under the cap, its data seeded, its setup typed; False: it does not start."""
        if not self.spend.hold():
            out.error = NOT_STARTED
            return False
        self.world.seed(spec)
        if problem := await self._setup(http, url, spec):
            out.error = problem
            self.spend.settle(0)
            return False
        return True

    async def _setup(self, http: aiohttp.ClientSession, url: str, spec: RunSpec) -> str:
        """The channel's model, persona and the workspace's limits, typed by an admin as ``/agent-limits``."""
        setup = spec.case.setup
        commands = [f"channel model {spec.model}"]
        if setup.channel_prompt:
            commands.append(f"channel prompt {setup.channel_prompt}")
        commands += setup.limits
        for words in commands:
            body = command_body(command="/agent-limits", text=words, user=spec.admin, channel=spec.channel,
                                team_id=spec.team)
            headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
            async with http.post(url, data=body, headers=headers) as resp:
                answer = (await resp.json()).get("text", "") if resp.status == 200 else f"HTTP {resp.status}"
            if not str(answer).startswith(SETUP_DONE):
                return f"setup `/agent-limits {words}` was refused: {str(answer).splitlines()[0][:200]}"
        return ""

    async def _until_stopped(self, http: aiohttp.ClientSession, url: str, spec: RunSpec, turns: int) -> None:
        """Wait until the thread shows ``turns`` stop lines; deny each approval card on the way."""
        slack, denied = self.world.slack, set()
        while True:
            seen = len(slack.calls)
            thread = slack.thread_messages(spec.channel, spec.root)
            if sum(1 for m in thread if _STOP_RE.search(m.block_text())) >= turns:
                return
            for message in thread:
                deny = next((b for b in message.buttons() if b.get("action_id") == DENY_ACTION_ID), None)
                if deny is not None and message.ts not in denied:
                    denied.add(message.ts)
                    body = action_body(action_id=DENY_ACTION_ID, value=str(deny.get("value")), user=spec.asker,
                                       channel=spec.channel, message_ts=message.ts, thread_ts=spec.root,
                                       team_id=spec.team)
                    await _post(http, url, body, form=True)
            await slack.wait_until(partial(_called_in, slack, seen, spec.channel), timeout=self.turn_timeout)

    async def _read(self, spec: RunSpec, out: Outcome) -> None:
        slack = self.world.slack
        thread = [m.block_text() or m.text for m in slack.thread_messages(spec.channel, spec.root)]
        out.thread = thread
        finals = [t for t in thread if _STOP_RE.search(t)]
        out.stop_reasons = [_STOP_RE.search(t).group(1) for t in finals]  # type: ignore[union-attr]
        out.answer = finals[-1].split("Stop reason:")[0].strip() if finals else ""
        out.uploads = [(f.filename, f.text) for f in slack.thread_files(spec.channel, spec.root)]
        keys = AppKeys(self.settings(spec.guard).redis_key_prefix)
        thread_id = Conversation(Workspace(spec.team), spec.channel, spec.root).id
        store = RedisThreadStore(self.redis, keys)
        out.calls = [{k: r.get(k) for k in ("tool", "arguments", "outcome")} for r in await store.traces(thread_id)]
        progress = await store.progress(thread_id)
        if progress is not None:  # each turn is a run of its own: its spend starts at nothing
            out.cost_micros += progress.cost_micros
            out.steps += progress.step
            out.tokens += progress.prompt_tokens + progress.completion_tokens
        host = self.world.attacker_host
        # Reached unless it never ran: a 404 from the attacker's server still carried the data there.
        out.attacker_reached = any(host in str(c.get("arguments")) and c.get("outcome") not in NOT_RUN
                                   for c in out.calls)

    def _judge(self, spec: RunSpec) -> Result:
        out = self._outcome(spec)
        case = filled(spec.case, self.world)
        return Result(spec, out, verdict(case, out), attack_succeeded(case, out) if case.injection else False,
                      task_done(case, out))


async def idle(redis: Redis, settings: Settings, timeout: float = IDLE_TIMEOUT_SECONDS) -> None:
    """Wait until no job of the service's queue is queued or in progress (arq's own keys), so closing it ends no
    run's job midway: a run posts its answer before its job ends, and a job cut short is resumed by the next
    service as if its worker had died."""
    deadline = time.monotonic() + timeout
    pattern = f"{in_progress_key_prefix}*{settings.redis_key_prefix}*"
    while time.monotonic() < deadline:
        queued = await redis.zcard(settings.arq_queue_name)
        if not queued and not [key async for key in redis.scan_iter(match=pattern, count=1000)]:
            return
        await asyncio.sleep(IDLE_POLL_SECONDS)


def filled(case: Case, world: World) -> Case:
    """The case with the judges' placeholders filled (a page's URL in ``called``)."""
    judges = [Judge.model_validate(world.fill_value(case, j.model_dump())) for j in case.judge]
    return case.model_copy(update={"judge": judges})


def _called_in(slack: FakeSlack, seen: int, channel: str) -> bool:
    """A call about ``channel`` came after the first ``seen`` (asked after each call: the newest is the one)."""
    if len(slack.calls) <= seen:
        return False
    params = slack.calls[-1].params
    return str(params.get("channel") or params.get("channel_id") or "") == channel


async def _post(http: aiohttp.ClientSession, url: str, body: bytes, *, form: bool = False) -> None:
    kind = "application/x-www-form-urlencoded" if form else "application/json"
    async with http.post(url, data=body, headers=signed_headers(SECRET, body, content_type=kind)) as resp:
        await resp.read()
        if resp.status != 200:
            raise aiohttp.ClientError(f"the app answered HTTP {resp.status}")


def usd(micros: int) -> Decimal:
    return Decimal(micros) / 1_000_000


def outcome_fields(result: Result) -> dict[str, Any]:
    """One run as the JSON report lists it."""
    spec, out = result.spec, result.outcome
    return {"case": spec.case.id, "category": spec.case.category, "model": spec.model, "attempt": spec.attempt,
            "guard": spec.guard, "passed": result.passed, "failure": result.failure, "attacked": result.attacked,
            "stop_reasons": out.stop_reasons, "cost_usd": float(usd(out.cost_micros)), "steps": out.steps,
            "tokens": out.tokens, "seconds": round(out.seconds, 3), "answer": out.answer, "calls": out.calls,
            "thread": out.thread}
