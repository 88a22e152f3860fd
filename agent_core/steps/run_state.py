"""The state of one run inside the loop: what the model proposed this step, and the run's mutable accounts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from agent_core.attachments import is_task_message
from agent_core.budget.calibration import Calibration
from agent_core.budget.hold import RunHolds
from agent_core.cancel import CancelToken
from agent_core.completion import LLMResponse
from agent_core.events import StepFinished
from agent_core.history import Trail, Window
from agent_core.request import RunRequest
from agent_core.stopper import Stopper
from agent_core.store import Message, Progress, ThreadStore
from tools import Executor, PreparedCall, ToolContext, ToolResult, record_dict


@dataclass
class Step:
    """What the model proposed this step."""

    thought: str | None
    calls: list[PreparedCall] = field(default_factory=list)
    final: str | None = None
    format_error: str | None = None


@dataclass
class Run:
    """The mutable state of one run; lives only inside ``Agent.events``."""

    run_id: str
    thread: str | None
    task: Message
    #: The thread's history before this run, counted once (``Window.fit`` trims it for each request).
    earlier: Window
    current: list[Message]
    unsaved: list[Message]
    progress: Progress
    stopper: Stopper
    executor: Executor
    #: The holds of the run's LLM calls on its budget (which they hold nothing on when it has none).
    holds: RunHolds
    cancel: CancelToken
    scope: ToolContext
    tools_spec: list[dict[str, Any]] | None
    #: The run's trace records until its next step write (None: they go straight to the Agent's trace sink).
    traces: TraceBuffer | None = None
    #: The step under way (its calls made), until the write that persists it: then it is a ``StepFinished``.
    open_step: StepFinished | None = None
    #: The caller asked for a ``StepFinished`` after each persisted step (``RunRequest.finished_steps``).
    finished_steps: bool = False
    #: The LLM's text arrives as it is written (the LLM streams and ``RunRequest.stream_text`` asks for it).
    streams: bool = False
    #: The run's system message (prompt and tool list) and its tool schemas' tokens: fixed for the run.
    system: Message = field(default_factory=dict)
    tools_tokens: int = 0
    #: The model the run's calls name (``RunRequest.model``); None: the LLM's own.
    model: str | None = None
    #: The completion cap of the last LLM call made, and whether a cut-off answer was retried with a larger one.
    call_cap: int = 0
    cut_retried: bool = False
    #: The run's factor from offline token counts to the provider's, learned from its calls' usage.
    calibration: Calibration = field(default_factory=lambda: Calibration(1.0))
    #: ``current`` counted as it grows and fitted to the history budget (see ``Trail``); made by the loop.
    trail: Trail | None = None
    #: A parked run resumed: its step's saved reply, used instead of the next LLM call (``agent_core.parking``),
    #: and the results its calls got before it was parked, by call id (those are not run again).
    replay: LLMResponse | None = None
    done: dict[str, ToolResult] = field(default_factory=dict)

    def remember(self, message: Message) -> None:
        """Add a message to this run's conversation and to what the next persist writes."""
        self.current.append(message)
        self.unsaved.append(message)


@dataclass
class TraceBuffer:
    """The Executor's trace sink in a run of a stored thread: records wait here and ride in the next step write
    (``ThreadStore.append``), so they share its atomic write and its thread, with nothing to bind."""

    pending: list[dict[str, Any]] = field(default_factory=list)

    async def record(self, rec: Any) -> None:
        self.pending.append(record_dict(rec))

    def take(self) -> list[dict[str, Any]]:
        taken, self.pending = self.pending, []
        return taken


def split_resumed(earlier: list[Message], task: str) -> tuple[list[Message], Message, list[Message]] | None:
    """A crashed worker's run: its messages start at its task message (the newest one with that text, its files'
    listing after it when it had files).

    Returns (history before the run, the task message, the run's own messages so far); None when not found.
    """
    for i in range(len(earlier) - 1, -1, -1):
        if is_task_message(earlier[i], task):
            return earlier[:i], earlier[i], earlier[i + 1 :]
    return None


async def start_of(
    request: RunRequest, store: ThreadStore | None
) -> tuple[list[Message], Message, list[Message], Progress]:
    """Where a run starts: the thread's history before it, its task message, its own messages so far (a crashed
    worker's run, resumed) and its progress."""
    earlier = list(request.history or ())
    saved = Progress()
    if request.thread is not None and store is not None:
        state = request.loaded or await store.load(request.thread)
        earlier, saved = [*state.history, *earlier], state.progress
    task: Message = {"role": "user", "content": request.task}
    if request.resume and saved.status in ("running", "parked") and saved.task:
        found = split_resumed(earlier, saved.task)
        return (*found, saved) if found is not None else (earlier, task, [], saved)
    return earlier, task, [], Progress(task=request.task, run_id=request.run_id or uuid.uuid4().hex, status="running")
