"""A run's writes: each step persisted (with the next call's first budget hold), and the run's end."""

from __future__ import annotations

from dataclasses import replace

from agent_core import history
from agent_core.cancel import Cancelled
from agent_core.errors import LLMError, StoreError
from agent_core.events import StepFinished, StopFacts, Stopped, StopReason
from agent_core.steps import parking, progress
from agent_core.steps.acting import shown
from agent_core.steps.run_state import Run
from agent_core.stopper import CallPlan, Stop
from agent_core.store import ThreadStore
from tools import Parked


class Deadline(Exception):
    """The run's wall-clock cap fired while something was in flight."""


_LEASE_LOST_ANSWER = "This run was stopped here because another worker took it over; it goes on there."


async def persist(run: Run, store: ThreadStore | None, upcoming: CallPlan | Stop | None = None) -> list[StepFinished]:
    """Write what the run added since the last write, with the first reserve for the ``upcoming`` call when
    there is one; the step this write made durable, if one was open and the caller asked for finished steps."""
    if run.cancel.abandoned:  # another runner owns the thread now: its history is not ours to write
        raise Cancelled(run.cancel.reason)
    traces = run.traces.take() if run.traces is not None else []
    if run.thread is not None and store is not None and (run.unsaved or traces):
        await run.holds.write_step(store, run.thread, (run.unsaved, run.progress, traces), upcoming)
    run.unsaved = []
    finished, run.open_step = run.open_step, None
    return [finished] if finished is not None and run.finished_steps else []


async def close(run: Run, store: ThreadStore | None, stop: Stop, answer: str) -> list[StepFinished | Stopped]:
    """End the run: answer every open call, persist the end, and build the final event (with the step the
    run stopped in, when the end's write made it durable)."""
    if run.cancel.abandoned:  # the lease was lost: write nothing, and let the caller post nothing
        return [Stopped(StopReason.CANCELLED, _LEASE_LOST_ANSWER, run.stopper.steps, run.stopper.usage,
                        run.cancel.reason, run.run_id, lease_lost=True,
                        facts=StopFacts(case="lease_lost", cancelled_by=run.cancel.reason))]
    if stop.parked:
        return await _park(run, store, stop)
    reason, facts = stop.reason, stop.facts
    if reason is not StopReason.FINAL_ANSWER:
        for call_id in history.unanswered(run.current):
            run.remember(history.not_executed(call_id, f"{reason.value}, the run stopped first"))
        answer = shown(run, stop.answer or progress.graceful_answer(reason, stop.detail, run.progress))
        if not stop.answer:  # the engine's account: its findings as shown, for a caller to word it
            facts = replace(facts, engine_answer=True, task=run.progress.task,
                            findings=tuple(shown(run, found) for found in run.progress.findings))
        elif facts.text:  # the start of a cut-off answer, as shown
            facts = replace(facts, text=shown(run, facts.text))
        run.remember({"role": "assistant", "content": answer})
    run.progress = replace(run.progress, status="stopped", stop_reason=reason.value, step=run.stopper.steps,
                           answer=answer)
    detail, store_failed = stop.detail, stop.store_failed
    finished: list[StepFinished | Stopped] = []
    try:
        finished.extend(await persist(run, store))
    except StoreError as exc:
        detail, store_failed = f"{detail}; the conversation could not be saved: {exc}", True
    return [*finished, Stopped(reason, answer, run.stopper.steps, run.stopper.usage, detail, run.run_id,
                               store_failed=store_failed, facts=facts)]


async def _park(run: Run, store: ThreadStore | None, stop: Stop) -> list[StepFinished | Stopped]:
    """Save the run at its held call (``agent_core.parking``): the step is not finished, nothing is answered."""
    run.progress = replace(run.progress, status="parked", step=run.stopper.steps, pending=parking.pending_of(run))
    run.open_step = None  # shown again, whole, when the resumed run finishes it
    try:
        await persist(run, store)
    except StoreError as exc:
        return [Stopped(StopReason.ERROR, f"The run could not be saved while it waits for an approval: {exc}",
                        run.stopper.steps, run.stopper.usage, f"error: {exc}", run.run_id, store_failed=True)]
    return [Stopped(StopReason.CANCELLED, "Waiting for an approval.", run.stopper.steps, run.stopper.usage,
                    stop.detail, run.run_id, parked=True)]


def stop_for(run: Run, exc: Exception) -> Stop:
    """The stop of a run that an exception ended: a cancel, a park, the time cap, the LLM or the store failing."""
    if isinstance(exc, Cancelled):
        return Stop(StopReason.CANCELLED, f"cancelled: {exc.reason}", facts=StopFacts(cancelled_by=exc.reason))
    if isinstance(exc, Parked):
        return parking.stop(str(exc))
    if isinstance(exc, Deadline):
        return run.stopper.time_stop()
    if isinstance(exc, LLMError):
        return Stop(StopReason.ERROR, f"error: {exc.cause}: {exc}",
                    facts=StopFacts(case="llm", cause=exc.cause, message=str(exc)))
    return Stop(StopReason.ERROR, f"error: the state store failed: {exc}", store_failed=True,
                facts=StopFacts(case="store", message=str(exc)))
