"""The agent loop: context → LLM → thought → tool calls → observations → stopper → next, top to bottom."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar, cast

import agent_core.files_in as files_in
import agent_core.telemetry as telemetry
from agent_core import context, history, text_react
from agent_core.budget import Budget, LateSettles, RunHolds
from agent_core.budget.calibration import Calibration
from agent_core.cancel import Cancelled, CancelToken
from agent_core.completion import LLMResponse
from agent_core.errors import LLMError, StoreError
from agent_core.events import (
    Event,
    FinalAnswer,
    RunStarted,
    StepFinished,
    StopFacts,
    Stopped,
    StopReason,
    StreamReset,
    Thought,
    ToolCalled,
    Usage,
)
from agent_core.llm import LLM, StreamingLLM
from agent_core.options import AgentOptions
from agent_core.request import RunRequest
from agent_core.settings import AgentSettings
from agent_core.sse import DeltaSink
from agent_core.steps import accounting, acting, closing, deltas, endings, progress, reading
from agent_core.steps.closing import Deadline
from agent_core.steps.parking import planned, replayed, saved_step
from agent_core.steps.planning import Planner
from agent_core.steps.run_state import Run, TraceBuffer, start_of
from agent_core.stopper import CallPlan, Stop, Stopper
from agent_core.store import ThreadStore
from agent_core.tokens import count_tools, counter_for
from tools import (
    DEFAULT_GUARD_MODE,
    DEFAULT_OBSERVATION_MAX_CHARS,
    Executor,
    GuardMode,
    Parked,
    Redactor,
    Registry,
    ToolContext,
    TraceSink,
)

T = TypeVar("T")


#: An LLM call's outcome: the reply; a Stop (the budget refused the call, or the reply ends the run); or the
#: prompt and plan of one more call (an answer cut off at its cap, asked for again with a larger one).
_Outcome = LLMResponse | Stop | tuple[context.Prompt, CallPlan]


#: Told each LLM call's outcome (``ok`` or the failure's cause) and its seconds, e.g. for metrics.
LLMCallObserver = Callable[[str, float], None]


class Agent:
    """A ReAct agent. ``events()`` streams typed events; ``run()`` returns the final :class:`Stopped`."""

    def __init__(
        self,
        llm: LLM,
        registry: Registry,
        options: AgentOptions,
        *,
        budget: Budget | None = None,
        store: ThreadStore | None = None,
        trace: TraceSink | None = None,
        on_llm_call: LLMCallObserver | None = None,
    ) -> None:
        """``options``: how it runs; the parts it talks to: the workspace ``budget`` (a run's request may bring
        its own), the thread ``store``, the tools' ``trace`` and ``on_llm_call`` (e.g. metrics)."""
        self.llm, self.registry, self.options, self.price = llm, registry, options, options.price
        # How a run's files reach the model: images, and audio transcribed at its price per minute.
        self.files = files_in.FileOptions.of(llm, options.vision, options.image_max_side, options.transcribe_model,
                                             options.transcribe_price)
        self.on_llm_call = on_llm_call
        self.limits = options.limits
        self.budget, self.store, self.trace = budget, store, trace
        self.secrets = tuple(options.secrets)
        self._redactor = Redactor(self.secrets)
        self.protocol = options.protocol
        # Text is streamed to the loop when the LLM can (and is set to): see agent_core/steps/deltas.py.
        self._streams = isinstance(llm, StreamingLLM) and llm.streams
        self.system_prompt = options.system_prompt or context.SYSTEM_PROMPT
        self.counter = options.counter or counter_for(llm.model)
        self._planner = Planner(self.counter, options.history_tokens, options.note_role)
        self._clock = options.clock
        self.late_settles = LateSettles()  # settles Redis failed, made once it is back
        self.exfiltration_guard = GuardMode(options.exfiltration_guard)

    @classmethod
    def from_settings(
        cls,
        settings: AgentSettings,
        registry: Registry,
        *,
        store: ThreadStore | None = None,
        trace: TraceSink | None = None,
        secrets: Iterable[str] = (),
        observation_max_chars: int = DEFAULT_OBSERVATION_MAX_CHARS,
        tool_timeouts: Mapping[str, float] | None = None,
        exfiltration_guard: GuardMode | str = DEFAULT_GUARD_MODE,
        on_llm_call: LLMCallObserver | None = None,
    ) -> Agent:
        """An agent on the OpenAI-compatible endpoint the settings name; ConfigError names a bad setting."""
        price = settings.require_llm()
        settings.check_leases()
        options = AgentOptions(
            price=price, limits=settings.limits(), secrets=(*settings.secrets(), *secrets),
            protocol=settings.agent_protocol, note_role=settings.agent_note_role,
            system_prompt=settings.agent_system_prompt, history_tokens=settings.agent_history_tokens,
            counter=counter_for(settings.openai_model, settings.openai_tokenizer),
            observation_max_chars=observation_max_chars, tool_timeouts=dict(tool_timeouts or {}),
            budget_wait_seconds=settings.agent_budget_wait_seconds, exfiltration_guard=exfiltration_guard,
            vision=settings.vision(), image_max_side=settings.agent_image_max_side,
            transcribe_model=settings.openai_transcribe_model or "", transcribe_price=settings.transcribe_price(),
        )
        return cls(settings.llm(), registry, options, store=store, trace=trace, on_llm_call=on_llm_call)

    async def aclose(self) -> None:
        await self.late_settles.aclose()
        await self.llm.aclose()

    async def run(self, request: RunRequest) -> Stopped:
        """Run to the end and return the final event."""
        last: Event | None = None
        async for last in self.events(request):  # noqa: B007 - only the last event is wanted
            pass
        assert isinstance(last, Stopped)
        return last

    async def events(self, request: RunRequest) -> AsyncIterator[Event]:
        """The run, as a stream of events that always ends with exactly one :class:`Stopped`."""
        try:
            run = await self._open(request)
        except StoreError as exc:
            yield Stopped(StopReason.ERROR, f"I could not load this conversation: {exc}", 0, Usage(),
                          f"error: {exc}", request.run_id or "", store_failed=True,
                          facts=StopFacts(case="load", message=str(exc)))
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
                prompt, plan = upcoming or planned(run) or self._planner.next_call(run)  # context, caps
                if isinstance(plan, Stop):
                    stop = plan
                    break
                live = self._live(run)                                          # thought (LLM), streamed
                call = self._guard(run, self._call_llm(run, prompt, plan, live.feed))
                # Armed, the answer is shown whole once its links are checked (``acting.shown``), never as written.
                quiet = run.executor.guard.armed(run.scope.egress)
                streamed = live.start(call, keep=endings.text_stands)
                # Only an armed run pays for the filter's extra generator layer on each streamed piece.
                async for delta in (deltas.without_answer_text(streamed) if quiet else streamed):
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
                    answer = acting.shown(run, progress.cap_answer(step.final), remembered=True)
                    stop = Stop(StopReason.FINAL_ANSWER, "final_answer: the model answered")
                    yield FinalAnswer(number, answer)
                    break
                calls = tuple(ToolCalled(number, c.call_id, c.tool, c.arguments) for c in step.calls)
                run.open_step = StepFinished(number, step.thought, calls)
                for called in calls:
                    yield called
                stop = acting.check_loops(run, step)                            # layer 3, before running
                results = await self._guard(run, acting.act(run, step, self.protocol)) if stop is None else []
                run.open_step = StepFinished(number, step.thought, calls, acting.observed(number, step, results))
                for seen in run.open_step.observations:                         # observation
                    yield seen
                stop = stop or run.stopper.record_step(results, failure=step.format_error)   # layer 4
                upcoming = self._planner.next_call(run) if stop is None else None
                for finished in await closing.persist(run, self.store, upcoming[1] if upcoming else None):  # saved
                    yield finished
        except (Cancelled, Deadline, LLMError, StoreError, Parked) as exc:
            stop = closing.stop_for(run, exc)
        finally:
            await live.aclose()  # an abandoned run's call is cancelled now, not left reading
            await run.holds.drop_first()
        # The step the run stopped in, if its end's write made it durable, then Stopped.
        for end in await closing.close(run, self.store, stop, answer):
            yield end

    # -- the steps of the loop ------------------------------------------------------------------------
    async def _open(self, request: RunRequest) -> Run:
        """The run's state: where it starts (``start_of``), its stopper, budget holds, tools and system message."""
        thread, registry = request.thread, request.registry
        earlier, task_message, current, progress_state = await start_of(request, self.store)
        replay, done = saved_step(progress_state) if request.resume else (None, {})
        run_id = progress_state.run_id or uuid.uuid4().hex
        budget = request.budget or self.budget
        calibration = Calibration(getattr(self.counter, "margin", 1.0), budget)
        stopper = Stopper(request.limits or self.limits, request.model.price if request.model else self.price,
                          clock=self._clock, started=request.started)
        stopper.steps = progress_state.step
        stopper.usage = Usage(progress_state.prompt_tokens, progress_state.completion_tokens, 0,
                              progress_state.cost_micros, progress_state.usage_estimated)
        traces = TraceBuffer() if thread is not None and self.store is not None else None
        executor = Executor(self.registry if registry is None else registry, trace=traces or self.trace,
                            secrets=self.secrets, observation_max_chars=self.options.observation_max_chars,
                            timeouts=self.options.tool_timeouts, exfiltration_guard=self.exfiltration_guard)
        # The guard is the run's, but private data read by earlier runs of the thread is in its context too.
        executor.remember_transcript(m.get("content") for m in (*earlier, *current))
        is_new = not current and progress_state.status != "parked"  # parked in its first step: the task is saved
        scope = request.scope or ToolContext(run_id="", step=0)
        stored_task = task_message
        if request.attachments:  # a resumed run is given its files again: its images are sent again
            files = self.files.for_run(request.model.name if request.model else None, budget, run_id, thread,
                                       self.store, stopper)  # transcripts paid from the budget, kept with the thread
            built, scope = await files_in.hand_over(progress_state.task, request.attachments, files, executor, scope)
            task_message, stored_task = built.sent, (built.stored if is_new else task_message)
        tools_spec = executor.registry.schemas() if self.protocol == "tools" and len(executor.registry) else None
        protocol_text = text_react.PROTOCOL_TEXT if self.protocol == "react" else ""
        own = history.repair(current)
        run = Run(
            run_id=run_id, thread=thread, task=task_message,
            # Counted once here, fitted to what the run's own messages leave at each step.
            earlier=history.Window(history.repair(earlier), self.counter), current=own,
            trail=history.Trail(own, self.counter),
            unsaved=[stored_task] if is_new else [], progress=replace(progress_state, status="running"),
            stopper=stopper, executor=executor,
            holds=RunHolds(budget, run_id, stopper, calibration, wait_seconds=self.options.budget_wait_seconds,
                           clock=self._clock, late=self.late_settles),
            cancel=request.cancel or CancelToken(), scope=scope,
            tools_spec=tools_spec, traces=traces, finished_steps=request.finished_steps,
            streams=self._streams and request.stream_text,
            # The run's tools are fixed: its system message and the schemas' tokens are made once.
            system=context.system_message(
                "\n\n".join(filter(None, (self.system_prompt, request.instructions))),
                executor.registry.describe(), protocol_text),
            model=request.model.name if request.model else None,
            tools_tokens=count_tools(self.counter, tools_spec),
            calibration=calibration, replay=replay, done=done,
        )
        run.progress = replace(run.progress, run_id=run.run_id)
        return run

    def _live(self, run: Run) -> deltas.LiveText[_Outcome]:
        redact = self._redactor.redact if run.streams else None
        return deltas.LiveText(run.stopper.steps + 1, self.protocol, redact, self.secrets,
                               tools_offered=run.tools_spec is not None)

    async def _call_llm(
        self, run: Run, prompt: context.Prompt, plan: CallPlan, on_delta: DeltaSink
    ) -> _Outcome:
        """The step's LLM call under its budget hold (or the Stop of a budget that refused it), accounted for."""
        if run.replay is not None:  # a parked run's step, saved with the call it was parked at: no call again
            return replayed(run)
        hold = await run.holds.take(plan, prompt.tokens + run.tools_tokens)
        if isinstance(hold, Stop):
            return hold
        plan = hold.plan
        run.call_cap = plan.max_tokens
        if run.streams:  # the LLM's kind checked once, in __init__ (a protocol isinstance costs ~50 µs)
            call = cast(StreamingLLM, self.llm).complete(
                prompt.messages, tools=run.tools_spec, max_tokens=plan.max_tokens, on_delta=on_delta, model=run.model)
        else:
            call = self.llm.complete(prompt.messages, tools=run.tools_spec, max_tokens=plan.max_tokens,
                                     model=run.model)
        started = time.perf_counter()
        # Given back on the way out, unless the endpoint answered; the call's span, when tracing is on.
        async with hold, telemetry.chat(run.model or self.llm.model, plan.max_tokens, prompt.messages) as span:
            try:
                reply = await hold.during(call)
            except LLMError as exc:
                self._observe(exc.cause, started)
                if exc.charged:  # the endpoint answered, unusably: it may bill the call, so its worst case counts
                    worst = accounting.worst_case(plan)
                    await hold.settle(worst.cost_micros)
                    run.stopper.record_call(worst)
                raise
            self._observe("ok", started)
            usage = accounting.usage_of(reply, plan, self.counter, run.stopper.price)  # the run's model's price
            span.answered(reply, usage)
            await hold.settle(usage.cost_micros,
                              run.calibration.observe(prompt.tokens + run.tools_tokens, reply.prompt_tokens or 0))
        accounting.record(run, usage)
        return endings.outcome(run, reply, self.protocol, self._redactor.redact, self._planner.context)

    def _observe(self, outcome: str, started: float) -> None:
        if self.on_llm_call is not None:
            self.on_llm_call(outcome, time.perf_counter() - started)

    async def _guard(self, run: Run, work: Awaitable[T]) -> T:
        """Race ``work`` against the cancel token and the wall-clock cap."""
        try:
            async with asyncio.timeout(max(run.stopper.seconds_left(), 0.0)):
                return await run.cancel.race(work)
        except TimeoutError:
            if run.stopper.seconds_left() <= 0:
                raise Deadline from None
            raise
