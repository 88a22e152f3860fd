"""The next LLM call of a run: its messages, and the caps it is made under (or the Stop that makes none).

A call that does not fit the run's token cap never stops the run for what it could leave out: before the first
call, a task no call can carry is said as such (by how much); earlier turns are dropped before the run is
stopped for them.
"""

from __future__ import annotations

from typing import Literal

from agent_core.attachments import is_task_message
from agent_core.budget.calibration import scaled, unscaled
from agent_core.context import Prompt, assemble
from agent_core.events import StopFacts, StopReason
from agent_core.history import Trail
from agent_core.steps import progress
from agent_core.steps.run_state import Run
from agent_core.stopper import CallPlan, Stop
from agent_core.tokens import TokenCounter


class Planner:
    """Assembles each call's context (``history_tokens`` of earlier turns at most) and plans its caps."""

    def __init__(self, counter: TokenCounter, history_tokens: int, note_role: Literal["system", "user"]) -> None:
        self.counter, self.history_tokens, self.note_role = counter, history_tokens, note_role

    def next_call(self, run: Run) -> tuple[Prompt, CallPlan | Stop]:
        prompt = self.context(run)
        plan = self.plan(run, prompt)
        if not isinstance(plan, Stop) or plan.reason is not StopReason.MAX_TOKENS:
            return prompt, plan
        if run.stopper.steps == 0:
            task, task_tokens = self._task_size(run)
            factor = run.calibration.factor()
            too_long = run.stopper.too_long(scaled(prompt.floor_tokens + run.tools_tokens, factor), task,
                                            scaled(task_tokens, factor))
            if too_long is not None:
                return prompt, too_long
        if prompt.earlier_tokens:
            lim = run.stopper.limits
            spare = lim.max_tokens - run.stopper.usage.total_tokens - lim.min_completion_tokens
            room = (unscaled(spare, run.calibration.factor()) - run.tools_tokens
                    - (prompt.tokens - prompt.earlier_tokens))
            if room < prompt.earlier_tokens:
                prompt = self.context(run, earlier_tokens=max(room, 0))
                plan = self.plan(run, prompt)
        return prompt, plan

    def context(self, run: Run, *, earlier_tokens: int | None = None) -> Prompt:
        """The next call's messages; ``earlier_tokens`` caps the earlier turns below ``history_tokens``."""
        history_tokens = self.history_tokens
        own = run.trail or Trail(run.current, self.counter)
        if earlier_tokens is not None:
            history_tokens = min(history_tokens, own.tokens + earlier_tokens)
        return assemble(
            run.system, run.earlier, run.task, own,
            progress.note(run.progress, run.stopper, task_sent=is_task_message(run.task, run.progress.task)),
            history_tokens=history_tokens, counter=self.counter, note_role=self.note_role,
        )

    @staticmethod
    def plan(run: Run, prompt: Prompt) -> CallPlan | Stop:
        if run.cancel.cancelled:
            return Stop(StopReason.CANCELLED, f"cancelled: {run.cancel.reason}",
                        facts=StopFacts(cancelled_by=run.cancel.reason))
        return run.stopper.plan_call(scaled(prompt.tokens + run.tools_tokens, run.calibration.factor()), None)

    def _task_size(self, run: Run) -> tuple[str, int]:
        content = run.task.get("content")
        task = content if isinstance(content, str) else run.progress.task
        return task, self.counter.count(task)
