"""The agent loop: context → LLM → thought → tool calls → observations → stopper → next, top to bottom."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from agent_core import context, history, progress, text_react
from agent_core.budget import Budget, Reservation
from agent_core.cancel import Cancelled, CancelToken
from agent_core.cost import Price
from agent_core.errors import ConfigError, LLMError, StoreError
from agent_core.events import (
    Event,
    FinalAnswer,
    Observed,
    RunStarted,
    Stopped,
    StopReason,
    Thought,
    ToolCalled,
    Usage,
)
from agent_core.limits import Limits
from agent_core.llm import LLM, LLMResponse, OpenAIChatLLM
from agent_core.settings import AgentSettings
from agent_core.stopper import CallPlan, Stop, Stopper
from agent_core.store import Message, Progress, ThreadStore
from agent_core.tokens import TokenCounter, count_messages, count_tools, counter_for
from tools import Executor, PreparedCall, Redactor, Registry, ToolContext, ToolResult, TraceSink, wrap_untrusted

T = TypeVar("T")


class _Deadline(Exception):
    """The run's wall-clock cap fired while something was in flight."""


@dataclass
class _Step:
    """What the model proposed this step."""

    thought: str | None
    calls: list[PreparedCall] = field(default_factory=list)
    final: str | None = None
    format_error: str | None = None


@dataclass
class _Run:
    """The mutable state of one run; lives only inside ``events``."""

    run_id: str
    thread: str | None
    task: Message
    earlier: list[Message]
    current: list[Message]
    unsaved: list[Message]
    progress: Progress
    stopper: Stopper
    executor: Executor
    budget: Budget | None
    cancel: CancelToken
    scope: ToolContext
    tools_spec: list[dict[str, Any]] | None


class Agent:
    """A ReAct agent. ``events()`` streams typed events; ``run()`` returns the final :class:`Stopped`."""

    def __init__(
        self,
        llm: LLM,
        registry: Registry,
        *,
        price: Price,
        limits: Limits | None = None,
        budget: Budget | None = None,
        store: ThreadStore | None = None,
        trace: TraceSink | None = None,
        observation_max_chars: int = 4000,
        tool_timeouts: Mapping[str, float] | None = None,
        secrets: Iterable[str] = (),
        protocol: Literal["tools", "react"] = "tools",
        system_prompt: str | None = None,
        history_tokens: int = 12_000,
        counter: TokenCounter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.llm, self.registry, self.price = llm, registry, price
        self.limits = limits or Limits()
        self.budget, self.store, self.trace = budget, store, trace
        self.observation_max_chars, self.tool_timeouts = observation_max_chars, dict(tool_timeouts or {})
        self.secrets = tuple(secrets)
        self._redactor = Redactor(self.secrets)
        self.protocol = protocol
        self.system_prompt = system_prompt or context.SYSTEM_PROMPT
        self.history_tokens = history_tokens
        self.counter = counter or counter_for(llm.model)
        self._clock = clock

    @classmethod
    def from_settings(
        cls,
        settings: AgentSettings,
        registry: Registry,
        *,
        store: ThreadStore | None = None,
        trace: TraceSink | None = None,
        secrets: Iterable[str] = (),
        observation_max_chars: int = 4000,
        tool_timeouts: Mapping[str, float] | None = None,
    ) -> Agent:
        """An agent on the OpenAI-compatible endpoint the settings name; ConfigError names a bad setting."""
        if settings.openai_api_key is None or not settings.openai_api_key.get_secret_value().strip():
            raise ConfigError("OPENAI_API_KEY is not set: set it to the API key of your OpenAI-compatible endpoint")
        price = settings.price()  # an unknown model without price overrides fails here, at start-up
        llm = OpenAIChatLLM(
            api_key=settings.openai_api_key.get_secret_value(),
            base_url=settings.openai_base_url,
            model=settings.openai_model,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
        )
        return cls(
            llm, registry, price=price, limits=settings.limits(), store=store, trace=trace,
            secrets=(*settings.secrets(), *secrets), protocol=settings.agent_protocol,
            system_prompt=settings.agent_system_prompt, history_tokens=settings.agent_history_tokens,
            observation_max_chars=observation_max_chars, tool_timeouts=tool_timeouts,
        )

    async def aclose(self) -> None:
        await self.llm.aclose()

    async def run(self, task: str, **kwargs: Any) -> Stopped:
        """Run to the end and return the final event."""
        last: Event | None = None
        async for last in self.events(task, **kwargs):  # noqa: B007 - only the last event is wanted
            pass
        assert isinstance(last, Stopped)
        return last

    async def events(
        self,
        task: str,
        *,
        thread: str | None = None,
        history: Sequence[Message] | None = None,
        run_id: str | None = None,
        cancel: CancelToken | None = None,
        scope: ToolContext | None = None,
        limits: Limits | None = None,
        budget: Budget | None = None,
        registry: Registry | None = None,
        resume: bool = False,
    ) -> AsyncIterator[Event]:
        """The run, as a stream of events that always ends with exactly one :class:`Stopped`."""
        try:
            run = await self._open(task, thread, history, run_id, cancel, scope, limits, budget, registry, resume)
        except StoreError as exc:
            yield Stopped(StopReason.ERROR, f"I could not load this conversation: {exc}", 0, Usage(),
                          f"error: {exc}", run_id or "")
            return
        yield RunStarted(run.run_id, run.progress.task, run.stopper.limits, tuple(run.executor.registry.names()),
                         run.stopper.steps)
        stop: Stop | None = None
        answer = ""
        try:
            while stop is None:
                messages = self._context(run)                                   # context
                plan = await self._plan(run, messages)                          # caps before the call
                if isinstance(plan, Stop):
                    stop = plan
                    break
                reply = await self._guard(run, self._call_llm(run, messages, plan))   # thought (LLM)
                if isinstance(reply, Stop):                                     # the budget refused it
                    stop = reply
                    break
                step = self._read(run, reply)
                yield Thought(run.stopper.steps, step.thought)
                if step.final is not None:                                      # layer 1: final answer
                    answer = progress.cap_answer(step.final)
                    stop = Stop(StopReason.FINAL_ANSWER, "final_answer: the model answered")
                    yield FinalAnswer(run.stopper.steps, answer)
                    break
                for call in step.calls:
                    yield ToolCalled(run.stopper.steps, call.call_id, call.tool, call.arguments)
                stop = self._check_loops(run, step)                             # layer 3, before running
                results = await self._guard(run, self._act(run, step)) if stop is None else []   # action
                for call, result in zip(step.calls, results, strict=False):     # observation
                    yield Observed(run.stopper.steps, call.call_id, call.tool, result.outcome.value,
                                   result.text, len(result.full))
                stop = stop or run.stopper.record_step(results, failure=step.format_error)   # layer 4
                await self._persist(run)
        except Cancelled as exc:
            stop = Stop(StopReason.CANCELLED, f"cancelled: {exc.reason}")
        except _Deadline:
            stop = run.stopper.time_stop()
        except LLMError as exc:
            stop = Stop(StopReason.ERROR, f"error: {exc.cause}: {exc}")
        except StoreError as exc:
            stop = Stop(StopReason.ERROR, f"error: the state store failed: {exc}")
        yield await self._close(run, stop, answer)

    # -- the steps of the loop ------------------------------------------------------------------------
    async def _open(
        self, task: str, thread: str | None, history_in: Sequence[Message] | None, run_id: str | None,
        cancel: CancelToken | None, scope: ToolContext | None, limits: Limits | None, budget: Budget | None,
        registry: Registry | None, resume: bool,
    ) -> _Run:
        earlier = list(history_in or ())
        saved = Progress()
        if thread is not None and self.store is not None:
            state = await self.store.load(thread)
            earlier, saved = [*state.history, *earlier], state.progress
        current: list[Message] = []
        task_message: Message = {"role": "user", "content": task}
        if resume and saved.status == "running" and saved.task:
            # A crashed worker's run: this run's messages start at its task message.
            for i in range(len(earlier) - 1, -1, -1):
                if earlier[i].get("role") == "user" and earlier[i].get("content") == saved.task:
                    earlier, task_message, current = earlier[:i], earlier[i], earlier[i + 1 :]
                    break
            progress_state = saved
        else:
            progress_state = Progress(task=task, run_id=run_id or uuid.uuid4().hex, status="running")
        stopper = Stopper(limits or self.limits, self.price, clock=self._clock)
        stopper.steps = progress_state.step
        stopper.usage = Usage(progress_state.prompt_tokens, progress_state.completion_tokens, 0,
                              progress_state.cost_micros)
        executor = Executor(self.registry if registry is None else registry, trace=self.trace, secrets=self.secrets,
                            observation_max_chars=self.observation_max_chars, timeouts=self.tool_timeouts)
        is_new = not current
        run = _Run(
            run_id=progress_state.run_id or uuid.uuid4().hex, thread=thread, task=task_message,
            earlier=history.repair(earlier), current=history.repair(current),
            unsaved=[task_message] if is_new else [], progress=replace(progress_state, status="running"),
            stopper=stopper, executor=executor, budget=budget or self.budget, cancel=cancel or CancelToken(),
            scope=scope or ToolContext(run_id="", step=0),
            tools_spec=executor.registry.schemas() if self.protocol == "tools" and len(executor.registry) else None,
        )
        run.progress = replace(run.progress, run_id=run.run_id)
        return run

    def _context(self, run: _Run) -> list[Message]:
        protocol_text = text_react.PROTOCOL_TEXT if self.protocol == "react" else ""
        system = context.system_message(self.system_prompt, run.executor.registry.describe(), protocol_text)
        return context.assemble(
            system, run.earlier, run.task, run.current, progress.note(run.progress, run.stopper),
            history_tokens=self.history_tokens, counter=self.counter,
        )

    async def _plan(self, run: _Run, messages: list[Message]) -> CallPlan | Stop:
        if run.cancel.cancelled:
            return Stop(StopReason.CANCELLED, f"cancelled: {run.cancel.reason}")
        prompt_tokens = count_messages(self.counter, messages) + count_tools(self.counter, run.tools_spec)
        return run.stopper.plan_call(prompt_tokens, None)

    async def _reserve(self, run: _Run, plan: CallPlan) -> tuple[CallPlan, Reservation | None] | Stop:
        """Hold the call's worst case; when it does not fit, shrink the call to what the budget has left."""
        if run.budget is None:
            return plan, None
        key = f"{run.run_id}:{run.stopper.steps + 1}"
        reservation = await run.budget.reserve(key, plan.worst_case_micros)
        if reservation is not None:  # the usual case: one round trip
            return plan, reservation
        smaller = run.stopper.plan_call(plan.prompt_tokens, await run.budget.remaining())
        if isinstance(smaller, Stop):
            return smaller
        reservation = await run.budget.reserve(key, smaller.worst_case_micros)
        if reservation is None:  # other runs took what was left in between
            return Stop(StopReason.BUDGET_EXHAUSTED,
                        "budget_exhausted: the workspace budget cannot cover the next call's worst case")
        return smaller, reservation

    async def _call_llm(self, run: _Run, messages: list[Message], plan: CallPlan) -> LLMResponse | Stop:
        held = await self._reserve(run, plan)
        if isinstance(held, Stop):
            return held
        plan, reservation = held
        settled = False
        try:
            reply = await self.llm.complete(messages, tools=run.tools_spec, max_tokens=plan.max_tokens)
            usage = self._usage(reply, messages, plan.max_tokens)
            if reservation is not None and run.budget is not None:
                await run.budget.settle(reservation, usage.cost_micros)
                settled = True
            run.stopper.record_call(usage)
            run.progress = replace(run.progress, step=run.stopper.steps, prompt_tokens=run.stopper.usage.prompt_tokens,
                                   completion_tokens=run.stopper.usage.completion_tokens,
                                   cost_micros=run.stopper.usage.cost_micros)
            return reply
        except LLMError as exc:
            if exc.charged:  # the endpoint answered, unusably: it may bill the call, so its worst case counts
                worst = Usage(plan.prompt_tokens, plan.max_tokens, 0, plan.worst_case_micros)
                if reservation is not None and run.budget is not None:
                    await run.budget.settle(reservation, worst.cost_micros)
                    settled = True
                run.stopper.record_call(worst)
            raise
        finally:
            if reservation is not None and run.budget is not None and not settled:
                # Shielded: a cancelled run must still give its hold back.
                await asyncio.shield(run.budget.release(reservation))

    def _usage(self, reply: LLMResponse, messages: list[Message], max_tokens: int) -> Usage:
        prompt = reply.prompt_tokens or count_messages(self.counter, messages)
        # Our own count is an estimate: it never exceeds what the call asked for (the hold covers that);
        # only the provider's own usage may say more.
        completion = reply.completion_tokens or min(max_tokens, self.counter.count(
            (reply.content or "") + "".join(c.arguments for c in reply.tool_calls)
        ))
        cached = min(reply.cached_tokens, prompt)
        return Usage(prompt, completion, cached, self.price.cost_micros(prompt, completion, cached))

    def _read(self, run: _Run, reply: LLMResponse) -> _Step:
        reply = self._redact(reply)  # a secret the model repeats is neither shown, stored nor sent to a tool
        if self.protocol == "react":
            return self._read_react(run, reply)
        thought = (reply.content or "").strip() or None
        message = reply.assistant_message()
        self._remember(run, message)
        if not reply.tool_calls:
            if thought is None:
                self._remember(run, {"role": "user", "content": "Your reply was empty. Call a tool or answer."})
                return _Step(None, format_error="empty reply")
            return _Step(thought, final=thought)
        calls = [run.executor.prepare(c.name, c.arguments, call_id=c.id) for c in reply.tool_calls]
        return _Step(thought, calls=calls)

    def _redact(self, reply: LLMResponse) -> LLMResponse:
        redact = self._redactor.redact
        calls = tuple(replace(c, arguments=redact(c.arguments)) for c in reply.tool_calls)
        return replace(reply, content=redact(reply.content) if reply.content else reply.content, tool_calls=calls)

    def _read_react(self, run: _Run, reply: LLMResponse) -> _Step:
        parsed = text_react.parse(reply.content or "")
        self._remember(run, {"role": "assistant", "content": reply.content or ""})
        if isinstance(parsed, text_react.ReactFinal):
            return _Step(parsed.thought, final=parsed.answer)
        if isinstance(parsed, text_react.ReactFormatError):
            self._remember(run, text_react.format_error_message(parsed))
            return _Step(parsed.thought, format_error=f"format error: {parsed.message}")
        call = run.executor.prepare(parsed.tool, parsed.arguments, call_id=f"react-{run.stopper.steps}")
        return _Step(parsed.thought, calls=[call])

    def _check_loops(self, run: _Run, step: _Step) -> Stop | None:
        for call in step.calls:
            stop = run.stopper.check_call(call.tool, call.canonical)
            if stop is not None:
                return stop
        return None

    async def _act(self, run: _Run, step: _Step) -> list[ToolResult]:
        def ctx(call: PreparedCall) -> ToolContext:
            return replace(run.scope, run_id=run.run_id, step=run.stopper.steps, task=run.progress.task,
                           thought=step.thought or "")

        results = list(await asyncio.gather(*(run.executor.execute(c, ctx(c)) for c in step.calls)))
        for call, result in zip(step.calls, results, strict=True):
            wrapped = wrap_untrusted(call.tool, result.text)
            if self.protocol == "react":
                self._remember(run, text_react.observation_message(wrapped))
            else:
                self._remember(run, {"role": "tool", "tool_call_id": call.call_id, "content": wrapped})
            if result.ok and not result.empty:
                run.progress = progress.add_finding(run.progress, call.tool, call.arguments, result.text)
        return results

    async def _guard(self, run: _Run, work: Awaitable[T]) -> T:
        """Race ``work`` against the cancel token and the wall-clock cap."""
        try:
            async with asyncio.timeout(max(run.stopper.seconds_left(), 0.0)):
                return await run.cancel.race(work)
        except TimeoutError:
            if run.stopper.seconds_left() <= 0:
                raise _Deadline from None
            raise

    def _remember(self, run: _Run, message: Message) -> None:
        run.current.append(message)
        run.unsaved.append(message)

    async def _persist(self, run: _Run) -> None:
        if run.thread is not None and self.store is not None and run.unsaved:
            await self.store.append(run.thread, run.unsaved, run.progress)
        run.unsaved = []

    async def _close(self, run: _Run, stop: Stop, answer: str) -> Stopped:
        """End the run: answer every open call, persist the end, and build the final event."""
        reason = stop.reason
        if reason is not StopReason.FINAL_ANSWER:
            for call_id in history.unanswered(run.current):
                self._remember(run, history.not_executed(call_id, f"{reason.value}, the run stopped first"))
            answer = progress.graceful_answer(reason, stop.detail, run.progress)
            self._remember(run, {"role": "assistant", "content": answer})
        run.progress = replace(run.progress, status="stopped", stop_reason=reason.value, step=run.stopper.steps)
        detail = stop.detail
        try:
            await self._persist(run)
        except StoreError as exc:
            detail = f"{detail}; the conversation could not be saved: {exc}"
        return Stopped(reason, answer, run.stopper.steps, run.stopper.usage, detail, run.run_id)

