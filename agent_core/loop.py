"""The agent loop: context → LLM → thought → tool calls → observations → stopper → next, top to bottom."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal, TypeVar, cast

from agent_core import budget_hold, context, deltas, endings, history, progress, reading, step_commit, text_react
from agent_core.budget import Budget
from agent_core.calibration import Calibration, scaled, unscaled
from agent_core.cancel import Cancelled, CancelToken
from agent_core.cost import Price
from agent_core.errors import LLMError, StoreError
from agent_core.events import (
    AnswerDelta,
    Event,
    FinalAnswer,
    Observed,
    RunStarted,
    StepFinished,
    Stopped,
    StopReason,
    StreamReset,
    Thought,
    ToolCalled,
    Usage,
)
from agent_core.limits import Limits
from agent_core.llm import LLM, LLMResponse, OpenAIChatLLM, StreamingLLM
from agent_core.request import RunRequest
from agent_core.run_state import Run, Step, TraceBuffer, split_resumed
from agent_core.settings import AgentSettings
from agent_core.sse import DeltaSink
from agent_core.stopper import CallPlan, Stop, Stopper
from agent_core.store import Message, Progress, ThreadStore
from agent_core.tokens import TokenCounter, count_messages, count_tools, counter_for
from tools import (
    DEFAULT_GUARD_MODE,
    Executor,
    GuardMode,
    PreparedCall,
    Redactor,
    Registry,
    ToolContext,
    ToolResult,
    TraceSink,
    wrap_untrusted,
)

#: A budget wait ends this long before the run's wall-clock cap, so a busy budget is reported as such.
_WAIT_MARGIN_SECONDS = 0.5
_LEASE_LOST_ANSWER = "This run was stopped here because another worker took it over; it goes on there."

T = TypeVar("T")


def _observed(number: int, step: Step, results: list[ToolResult]) -> tuple[Observed, ...]:
    """The step's tool results as the model saw them, in call order (none when the calls were not run)."""
    return tuple(
        Observed(number, call.call_id, call.tool, result.outcome.value, result.text, len(result.full),
                 result.duration_ms)
        for call, result in zip(step.calls, results, strict=False)
    )


def _as_request(request: RunRequest | str, kwargs: dict[str, Any]) -> RunRequest:
    """The one shape a run starts from: the older ``events(task, **fields)`` builds the same RunRequest."""
    if isinstance(request, str):
        return RunRequest(request, **kwargs)
    if kwargs:
        raise TypeError(f"events(RunRequest) takes no other arguments, got {sorted(kwargs)!r}")
    return request


#: An LLM call's outcome: the reply; a Stop (the budget refused the call, or the reply ends the run); or the
#: prompt and plan of one more call (an answer cut off at its cap, asked for again with a larger one).
_Outcome = LLMResponse | Stop | tuple[context.Prompt, CallPlan]


async def _without_answer_text(deltas: AsyncIterable[Event]) -> AsyncIterator[Event]:
    """The call's streamed events but the answer's text (an armed run shows its answer whole, links checked)."""
    async for delta in deltas:
        if not isinstance(delta, AnswerDelta):
            yield delta


def _text_stands(outcome: object) -> bool:
    """Whether a call's streamed text stands: it was a reply, or the start of an answer that stays cut off."""
    return isinstance(outcome, LLMResponse) or (isinstance(outcome, Stop) and outcome.reason is StopReason.CUT_OFF)


class _Deadline(Exception):
    """The run's wall-clock cap fired while something was in flight."""


#: Told each LLM call's outcome (``ok`` or the failure's cause) and its seconds, e.g. for metrics.
LLMCallObserver = Callable[[str, float], None]


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
        note_role: Literal["system", "user"] = "system",
        system_prompt: str | None = None,
        history_tokens: int = 12_000,
        counter: TokenCounter | None = None,
        clock: Callable[[], float] = time.monotonic,
        budget_wait_seconds: float = budget_hold.DEFAULT_BUDGET_WAIT_SECONDS,
        exfiltration_guard: GuardMode | str = DEFAULT_GUARD_MODE,
        on_llm_call: LLMCallObserver | None = None,
    ) -> None:
        self.llm, self.registry, self.price = llm, registry, price
        self.on_llm_call = on_llm_call
        self.limits = limits or Limits()
        self.budget, self.store, self.trace = budget, store, trace
        self.observation_max_chars, self.tool_timeouts = observation_max_chars, dict(tool_timeouts or {})
        self.secrets = tuple(secrets)
        self._redactor = Redactor(self.secrets)
        self.protocol = protocol
        self.note_role = note_role
        # Text is streamed to the loop when the LLM can (and is set to): see agent_core/deltas.py.
        self._streams = isinstance(llm, StreamingLLM) and llm.streams
        self.system_prompt = system_prompt or context.SYSTEM_PROMPT
        self.history_tokens = history_tokens
        self.counter = counter or counter_for(llm.model)
        self._clock = clock
        self.budget_wait_seconds = budget_wait_seconds
        self.exfiltration_guard = GuardMode(exfiltration_guard)

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
        exfiltration_guard: GuardMode | str = DEFAULT_GUARD_MODE,
        on_llm_call: LLMCallObserver | None = None,
    ) -> Agent:
        """An agent on the OpenAI-compatible endpoint the settings name; ConfigError names a bad setting."""
        price = settings.require_llm()
        settings.check_leases()
        assert settings.openai_api_key is not None  # require_llm refused it otherwise
        llm = OpenAIChatLLM(
            api_key=settings.openai_api_key.get_secret_value(),
            base_url=settings.openai_base_url,
            model=settings.openai_model,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
            stream=settings.openai_stream,
            api_version=settings.openai_api_version or None,
            max_connections=settings.openai_max_connections,
        )
        return cls(
            llm, registry, price=price, limits=settings.limits(), store=store, trace=trace,
            secrets=(*settings.secrets(), *secrets), protocol=settings.agent_protocol,
            note_role=settings.agent_note_role, system_prompt=settings.agent_system_prompt,
            history_tokens=settings.agent_history_tokens,
            counter=counter_for(settings.openai_model, settings.openai_tokenizer),
            observation_max_chars=observation_max_chars, tool_timeouts=tool_timeouts,
            budget_wait_seconds=settings.agent_budget_wait_seconds,
            exfiltration_guard=exfiltration_guard, on_llm_call=on_llm_call,
        )

    async def aclose(self) -> None:
        await self.llm.aclose()

    async def run(self, request: RunRequest | str, **kwargs: Any) -> Stopped:
        """Run to the end and return the final event."""
        last: Event | None = None
        async for last in self.events(request, **kwargs):  # noqa: B007 - only the last event is wanted
            pass
        assert isinstance(last, Stopped)
        return last

    async def events(self, request: RunRequest | str, **kwargs: Any) -> AsyncIterator[Event]:
        """The run, as a stream of events that always ends with exactly one :class:`Stopped`.

        ``request`` is a :class:`RunRequest`, or its task with the other fields as keywords
        (``events("2+2?", thread=...)``), which builds the same value.
        """
        request = _as_request(request, kwargs)
        try:
            run = await self._open(request)
        except StoreError as exc:
            yield Stopped(StopReason.ERROR, f"I could not load this conversation: {exc}", 0, Usage(),
                          f"error: {exc}", request.run_id or "", store_failed=True)
            return
        async with contextlib.aclosing(self._steps(run)) as steps:  # closed with the caller's iteration
            async for event in steps:
                yield event

    async def _steps(self, run: Run) -> AsyncGenerator[Event, None]:
        """The loop itself, from RunStarted to Stopped: context, LLM, thought, tools, observations, stopper."""
        yield RunStarted(run.run_id, run.progress.task, run.stopper.limits, tuple(run.executor.registry.names()),
                         run.stopper.steps)
        stop: Stop | None = None
        answer = ""
        live = self._live(run)  # the step's streamed LLM call (none started yet: closing it does nothing)
        upcoming: tuple[context.Prompt, CallPlan | Stop] | None = None  # the next call, made ready with a write
        try:
            while stop is None:
                prompt, plan = upcoming or await self._next_call(run)           # context, caps before the call
                if isinstance(plan, Stop):
                    stop = plan
                    break
                live = self._live(run)                                          # thought (LLM), streamed
                call = self._guard(run, self._call_llm(run, prompt, plan, live.feed))
                # Armed, the answer is shown whole once its links are checked (``_shown``), never as written.
                quiet = run.executor.guard.armed(run.scope.egress)
                streamed = live.start(call, keep=_text_stands)
                # Only an armed run pays for the filter's extra generator layer on each streamed piece.
                async for delta in (_without_answer_text(streamed) if quiet else streamed):
                    yield delta
                reply = live.result()           # or the budget refused it, the model declined, the answer was cut off
                if not isinstance(reply, LLMResponse):
                    stop, upcoming = (reply, None) if isinstance(reply, Stop) else (None, reply)  # or a larger cap
                    continue
                step = reading.read(run, reply, protocol=self.protocol, redactor=self._redactor)
                if step.final is None and live.answered and not quiet:          # the streamed text was no answer
                    yield StreamReset(live.step, "not_final")
                number = run.stopper.steps
                yield Thought(number, step.thought)
                if step.final is not None:                                      # layer 1: final answer
                    answer = self._shown(run, progress.cap_answer(step.final), remembered=True)
                    stop = Stop(StopReason.FINAL_ANSWER, "final_answer: the model answered")
                    yield FinalAnswer(number, answer)
                    break
                calls = tuple(ToolCalled(number, c.call_id, c.tool, c.arguments) for c in step.calls)
                run.open_step = StepFinished(number, step.thought, calls)
                for called in calls:
                    yield called
                stop = self._check_loops(run, step)                             # layer 3, before running
                results = await self._guard(run, self._act(run, step)) if stop is None else []   # action
                run.open_step = StepFinished(number, step.thought, calls, _observed(number, step, results))
                for seen in run.open_step.observations:                         # observation
                    yield seen
                stop = stop or run.stopper.record_step(results, failure=step.format_error)   # layer 4
                upcoming = await self._next_call(run) if stop is None else None
                for finished in await self._persist(run, upcoming[1] if upcoming else None):  # the step, persisted
                    yield finished
        except (Cancelled, _Deadline, LLMError, StoreError) as exc:
            stop = self._stop_for(run, exc)
        finally:
            await live.aclose()  # an abandoned run's call is cancelled now, not left reading
            await self._drop_first_hold(run)
        for end in await self._close(run, stop, answer):  # the step the run stopped in, if any, then Stopped
            yield end

    # -- the steps of the loop ------------------------------------------------------------------------
    def _stop_for(self, run: Run, exc: Exception) -> Stop:
        """The stop of a run that an exception ended: a cancel, the time cap, the LLM or the store failing."""
        if isinstance(exc, Cancelled):
            return Stop(StopReason.CANCELLED, f"cancelled: {exc.reason}")
        if isinstance(exc, _Deadline):
            return run.stopper.time_stop()
        if isinstance(exc, LLMError):
            return Stop(StopReason.ERROR, f"error: {exc.cause}: {exc}")
        return Stop(StopReason.ERROR, f"error: the state store failed: {exc}", store_failed=True)

    async def _open(self, request: RunRequest) -> Run:
        task, thread, run_id, registry = request.task, request.thread, request.run_id, request.registry
        earlier = list(request.history or ())
        saved = Progress()
        if thread is not None and self.store is not None:
            state = request.loaded or await self.store.load(thread)
            earlier, saved = [*state.history, *earlier], state.progress
        current: list[Message] = []
        task_message: Message = {"role": "user", "content": task}
        if request.resume and saved.status == "running" and saved.task:
            found = split_resumed(earlier, saved.task)
            if found is not None:
                earlier, task_message, current = found
            progress_state = saved
        else:
            progress_state = Progress(task=task, run_id=run_id or uuid.uuid4().hex, status="running")
        stopper = Stopper(request.limits or self.limits, self.price, clock=self._clock)
        stopper.steps = progress_state.step
        stopper.usage = Usage(progress_state.prompt_tokens, progress_state.completion_tokens, 0,
                              progress_state.cost_micros, progress_state.usage_estimated)
        traces = TraceBuffer() if thread is not None and self.store is not None else None
        executor = Executor(self.registry if registry is None else registry, trace=traces or self.trace,
                            secrets=self.secrets, observation_max_chars=self.observation_max_chars,
                            timeouts=self.tool_timeouts, exfiltration_guard=self.exfiltration_guard)
        # The guard is the run's, but private data read by earlier runs of the thread is in its context too.
        executor.remember_transcript(m.get("content") for m in (*earlier, *current))
        is_new = not current
        tools_spec = executor.registry.schemas() if self.protocol == "tools" and len(executor.registry) else None
        protocol_text = text_react.PROTOCOL_TEXT if self.protocol == "react" else ""
        run = Run(
            run_id=progress_state.run_id or uuid.uuid4().hex, thread=thread, task=task_message,
            # Counted once here, fitted to what the run's own messages leave at each step.
            earlier=history.Window(history.repair(earlier), self.counter), current=history.repair(current),
            unsaved=[task_message] if is_new else [], progress=replace(progress_state, status="running"),
            stopper=stopper, executor=executor, budget=request.budget or self.budget,
            cancel=request.cancel or CancelToken(), scope=request.scope or ToolContext(run_id="", step=0),
            tools_spec=tools_spec, traces=traces, finished_steps=request.finished_steps,
            streams=self._streams and request.stream_text,
            # The run's tools are fixed: its system message and the schemas' tokens are made once.
            system=context.system_message(self.system_prompt, executor.registry.describe(), protocol_text),
            tools_tokens=count_tools(self.counter, tools_spec),
            calibration=Calibration(getattr(self.counter, "margin", 1.0)),
        )
        run.progress = replace(run.progress, run_id=run.run_id)
        return run

    async def _next_call(self, run: Run) -> tuple[context.Prompt, CallPlan | Stop]:
        prompt = self._context(run)
        plan = await self._plan(run, prompt)
        if not isinstance(plan, Stop) or plan.reason is not StopReason.MAX_TOKENS:
            return prompt, plan
        # A call that does not fit the token cap: never stop for what the run could leave out. Before the first
        # call, a task no call can carry is said as such (by how much); earlier turns are dropped before the run
        # is stopped for them.
        if run.stopper.steps == 0:
            task, task_tokens = self._task_size(run)
            factor = self._factor(run)
            too_long = run.stopper.too_long(scaled(prompt.floor_tokens + run.tools_tokens, factor), task,
                                            scaled(task_tokens, factor))
            if too_long is not None:
                return prompt, too_long
        if prompt.earlier_tokens:
            lim = run.stopper.limits
            spare = lim.max_tokens - run.stopper.usage.total_tokens - lim.min_completion_tokens
            room = unscaled(spare, self._factor(run)) - run.tools_tokens - (prompt.tokens - prompt.earlier_tokens)
            if room < prompt.earlier_tokens:
                prompt = self._context(run, earlier_tokens=max(room, 0))
                plan = await self._plan(run, prompt)
        return prompt, plan

    def _ending(self, run: Run, reply: LLMResponse) -> _Outcome:
        """``reply`` when it is a step. A refusal or a content filter's stop ends the run; an answer cut off at its
        cap is asked for once more with twice the cap when the run's limits allow it, else ends the run marked
        as cut off."""
        if reply.refusal is None and reply.finish_reason not in endings.UNUSUAL:
            return reply  # the common case: one attribute and one set look-up
        judged = endings.judge(reply, self.protocol, run.call_cap, self._redactor.redact)
        if judged is None:
            return reply
        if isinstance(judged, Stop):
            return judged
        if run.cut_retried:
            return endings.cut_off(judged, run.call_cap, "it was cut off again after one retry with a larger cap")
        run.cut_retried = True
        prompt = self._context(run)
        plan = run.stopper.plan_call(prompt.tokens + run.tools_tokens, None, completion_cap=2 * run.call_cap)
        if isinstance(plan, CallPlan) and plan.max_tokens > run.call_cap and not run.cancel.cancelled:
            return prompt, plan
        return endings.cut_off(judged, run.call_cap, "a larger call does not fit this run's limits")

    def _task_size(self, run: Run) -> tuple[str, int]:
        content = run.task.get("content")
        task = content if isinstance(content, str) else run.progress.task
        return task, self.counter.count(task)

    def _context(self, run: Run, *, earlier_tokens: int | None = None) -> context.Prompt:
        """The next call's messages; ``earlier_tokens`` caps the earlier turns below ``history_tokens``."""
        history_tokens = self.history_tokens
        if earlier_tokens is not None:
            current = count_messages(self.counter, run.current)
            history_tokens = min(history_tokens, current + earlier_tokens)
        return context.assemble(
            run.system, run.earlier, run.task, run.current,
            progress.note(run.progress, run.stopper, task_sent=run.task.get("content") == run.progress.task),
            history_tokens=history_tokens, counter=self.counter, note_role=self.note_role,
        )

    async def _plan(self, run: Run, prompt: context.Prompt) -> CallPlan | Stop:
        if run.cancel.cancelled:
            return Stop(StopReason.CANCELLED, f"cancelled: {run.cancel.reason}")
        return run.stopper.plan_call(scaled(prompt.tokens + run.tools_tokens, self._factor(run)), None)

    @staticmethod
    def _factor(run: Run) -> float:
        """The factor from this run's offline counts to the provider's (see ``agent_core.calibration``)."""
        return run.calibration.factor(run.budget.prompt_factor if run.budget is not None else None)

    async def _reserve(self, run: Run, plan: CallPlan, counted: int) -> budget_hold.Held | Stop | None:
        """Hold the call's worst case; wait for other runs' holds, or shrink the call, when it does not fit.
        ``counted``: the prompt's offline count, re-scaled when the reserve told of a larger workspace factor."""
        if run.budget is None:
            return None
        wait = min(self.budget_wait_seconds, max(run.stopper.seconds_left() - _WAIT_MARGIN_SECONDS, 0.0))
        first, run.first_hold = run.first_hold, None
        held = await self._hold(run, plan, wait, first)
        if isinstance(held, budget_hold.Held) and held.plan.prompt_tokens < scaled(counted, self._factor(run)):
            # This worker's first call in the workspace: the reserve told it what other runs learned, and the
            # hold is re-made (under the same key, so it replaces the first) at that worst case.
            better = run.stopper.plan_call(scaled(counted, self._factor(run)), None, completion_cap=plan.max_tokens)
            again = better if isinstance(better, Stop) else await self._hold(run, better, wait, None)
            if isinstance(again, Stop):
                with contextlib.suppress(StoreError):
                    await held.release()
            return again
        return held

    async def _hold(self, run: Run, plan: CallPlan, wait: float, first: budget_hold.FirstTry | None
                    ) -> budget_hold.Held | Stop:
        assert run.budget is not None
        cap = max(plan.max_tokens, run.stopper.limits.max_completion_tokens)  # a cut-off answer's retry asks more
        return await budget_hold.hold_for_call(
            run.budget, self._hold_key(run), plan,
            lambda left, name: run.stopper.plan_call(plan.prompt_tokens, left, name, completion_cap=cap),
            wait_seconds=wait, first=first,
        )

    @staticmethod
    def _hold_key(run: Run) -> str:
        return f"{run.run_id}:{run.stopper.steps + 1}"

    async def _drop_first_hold(self, run: Run) -> None:
        """Give back a hold made ahead for a call the run did not make (it was cancelled or stopped first)."""
        first, run.first_hold = run.first_hold, None
        if first is not None and first.reservation is not None and run.budget is not None:
            # Shielded, as after a call; a store that is down lets the hold lapse within one lease period.
            with contextlib.suppress(StoreError):
                await asyncio.shield(run.budget.release(first.reservation))

    def _live(self, run: Run) -> deltas.LiveText[_Outcome]:
        redact = self._redactor.redact if run.streams else None
        return deltas.LiveText(run.stopper.steps + 1, self.protocol, redact, self.secrets,
                               tools_offered=run.tools_spec is not None)

    async def _call_llm(
        self, run: Run, prompt: context.Prompt, plan: CallPlan, on_delta: DeltaSink
    ) -> _Outcome:
        held = await self._reserve(run, plan, prompt.tokens + run.tools_tokens)
        if isinstance(held, Stop):
            return held
        plan = held.plan if held is not None else plan
        run.call_cap = plan.max_tokens
        if run.streams:  # the LLM's kind checked once, in __init__ (a protocol isinstance costs ~50 µs)
            call = cast(StreamingLLM, self.llm).complete(
                prompt.messages, tools=run.tools_spec, max_tokens=plan.max_tokens, on_delta=on_delta)
        else:
            call = self.llm.complete(prompt.messages, tools=run.tools_spec, max_tokens=plan.max_tokens)
        settled, started = False, time.perf_counter()
        billed = False  # the endpoint answered: its hold is settled, or left to lapse (charged), never given back
        try:
            reply = await (call if held is None else budget_hold.while_held(held, call))  # the hold kept alive
            billed = True
            if self.on_llm_call is not None:
                self.on_llm_call("ok", time.perf_counter() - started)
            usage = self._usage(reply, plan.prompt_tokens, plan.max_tokens)
            factor = run.calibration.observe(prompt.tokens + run.tools_tokens, reply.prompt_tokens or 0)
            if held is not None:
                await held.settle(usage.cost_micros, factor)
                settled = True
            run.stopper.record_call(usage)
            total = run.stopper.usage
            run.progress = replace(run.progress, step=run.stopper.steps, prompt_tokens=total.prompt_tokens,
                                   completion_tokens=total.completion_tokens, cost_micros=total.cost_micros,
                                   usage_estimated=total.estimated)
            return self._ending(run, reply)
        except LLMError as exc:
            if self.on_llm_call is not None:
                self.on_llm_call(exc.cause, time.perf_counter() - started)
            billed = exc.charged
            if exc.charged:  # the endpoint answered, unusably: it may bill the call, so its worst case counts
                worst = Usage(plan.prompt_tokens, plan.max_tokens, 0, plan.worst_case_micros, estimated=True)
                if held is not None:
                    await held.settle(worst.cost_micros)
                    settled = True
                run.stopper.record_call(worst)
            raise
        finally:
            if held is not None and not settled and not billed:
                # Shielded: a cancelled run must still give its hold back. A store that is down must not mask
                # why the call failed: the unrenewed hold lapses on its own within one lease period.
                with contextlib.suppress(StoreError):
                    await asyncio.shield(held.release())

    def _usage(self, reply: LLMResponse, prompt_tokens: int, max_tokens: int) -> Usage:
        """The endpoint's usage report; what it left out is counted offline, and the usage marked an estimate."""
        prompt = reply.prompt_tokens or prompt_tokens
        # Our own count is an estimate: it never exceeds what the call asked for (the hold covers that);
        # only the provider's own usage may say more.
        completion = reply.completion_tokens or min(max_tokens, self.counter.count(
            (reply.content or "") + (reply.reasoning or "") + (reply.refusal or "")
            + "".join(c.arguments for c in reply.tool_calls)
        ))
        cached = min(reply.cached_tokens, prompt)
        estimated = not reply.prompt_tokens or not reply.completion_tokens or reply.usage_estimated
        return Usage(prompt, completion, cached, self.price.cost_micros(prompt, completion, cached), estimated)

    def _check_loops(self, run: Run, step: Step) -> Stop | None:
        for call in step.calls:
            stop = run.stopper.check_call(call.tool, call.canonical)
            if stop is not None:
                return stop
        return None

    async def _act(self, run: Run, step: Step) -> list[ToolResult]:
        def ctx(call: PreparedCall) -> ToolContext:
            return replace(run.scope, run_id=run.run_id, step=run.stopper.steps, task=run.progress.task,
                           thought=step.thought or "")

        results = list(await asyncio.gather(*(run.executor.execute(c, ctx(c)) for c in step.calls)))
        for call, result in zip(step.calls, results, strict=True):
            wrapped = wrap_untrusted(call.tool, result.text)
            if self.protocol == "react":
                run.remember(text_react.observation_message(wrapped))
            else:
                run.remember({"role": "tool", "tool_call_id": call.call_id, "content": wrapped})
            if result.ok and not result.empty:
                run.progress = progress.add_finding(run.progress, call.tool, call.arguments, result.text)
        return results

    def _shown(self, run: Run, answer: str, *, remembered: bool = False) -> str:
        """The answer as every display and the history get it: armed, links the run may not reach are text.
        ``remembered``: the model's reply holding it is the last message remembered, and is rewritten too."""
        ctx = replace(run.scope, run_id=run.run_id, step=run.stopper.steps, task=run.progress.task)
        shown = run.executor.guard.answer(answer, ctx)
        last = run.current[-1] if remembered and run.current else None
        if shown != answer and last is not None and isinstance(last.get("content"), str):
            last["content"] = run.executor.guard.answer(last["content"], ctx)
        return shown

    async def _guard(self, run: Run, work: Awaitable[T]) -> T:
        """Race ``work`` against the cancel token and the wall-clock cap."""
        try:
            async with asyncio.timeout(max(run.stopper.seconds_left(), 0.0)):
                return await run.cancel.race(work)
        except TimeoutError:
            if run.stopper.seconds_left() <= 0:
                raise _Deadline from None
            raise

    async def _persist(self, run: Run, upcoming: CallPlan | Stop | None = None) -> list[StepFinished]:
        """Write what the run added since the last write, with the first reserve for the ``upcoming`` call when
        there is one; the step this write made durable, if one was open and the caller asked for finished steps."""
        if run.cancel.abandoned:  # another runner owns the thread now: its history is not ours to write
            raise Cancelled(run.cancel.reason)
        traces = run.traces.take() if run.traces is not None else []
        if run.thread is not None and self.store is not None and (run.unsaved or traces):
            if isinstance(upcoming, CallPlan) and run.budget is not None:  # one round trip, not two
                run.first_hold = await step_commit.write_and_reserve(
                    self.store, run.budget, run.thread, (run.unsaved, run.progress, traces),
                    (self._hold_key(run), upcoming.worst_case_micros), clock=self._clock)
            else:
                await self.store.append(run.thread, run.unsaved, run.progress, traces)
        run.unsaved = []
        finished, run.open_step = run.open_step, None
        return [finished] if finished is not None and run.finished_steps else []

    async def _close(self, run: Run, stop: Stop, answer: str) -> list[StepFinished | Stopped]:
        """End the run: answer every open call, persist the end, and build the final event (with the step the
        run stopped in, when the end's write made it durable)."""
        if run.cancel.abandoned:  # the lease was lost: write nothing, and let the caller post nothing
            return [Stopped(StopReason.CANCELLED, _LEASE_LOST_ANSWER, run.stopper.steps, run.stopper.usage,
                            run.cancel.reason, run.run_id, lease_lost=True)]
        reason = stop.reason
        if reason is not StopReason.FINAL_ANSWER:
            for call_id in history.unanswered(run.current):
                run.remember(history.not_executed(call_id, f"{reason.value}, the run stopped first"))
            answer = self._shown(run, stop.answer or progress.graceful_answer(reason, stop.detail, run.progress))
            run.remember({"role": "assistant", "content": answer})
        run.progress = replace(run.progress, status="stopped", stop_reason=reason.value, step=run.stopper.steps,
                               answer=answer)
        detail, store_failed = stop.detail, stop.store_failed
        finished: list[StepFinished | Stopped] = []
        try:
            finished.extend(await self._persist(run))
        except StoreError as exc:
            detail, store_failed = f"{detail}; the conversation could not be saved: {exc}", True
        return [*finished, Stopped(reason, answer, run.stopper.steps, run.stopper.usage, detail, run.run_id,
                                   store_failed=store_failed)]

