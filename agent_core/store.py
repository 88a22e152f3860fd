"""ThreadStore port: where a conversation's history and progress live between steps and runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agent_core.redis_batch import Pending

Message = dict[str, Any]
"""One Chat Completions message (``role``, ``content``, ``tool_calls``, ``tool_call_id``)."""

#: ``parked``: the run waits for an approval, saved at the held call (``agent_core.parking``), no worker on it.
RunStatus = Literal["idle", "running", "parked", "stopped"]


@dataclass(frozen=True, slots=True)
class Progress:
    """What the run has done so far; re-injected into every request so the task is never lost."""

    task: str = ""
    run_id: str = ""
    step: int = 0
    status: RunStatus = "idle"
    tools_used: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    stop_reason: str = ""
    #: Spend of the run so far, so a resumed run keeps counting against its caps.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_micros: int = 0
    #: Some of that spend was counted offline: the endpoint did not report it.
    usage_estimated: bool = False
    #: The answer, once the run stopped: the end is saved before it is posted, so a worker that died in between
    #: leaves the next one what to post, without reading the history back.
    answer: str = ""
    #: A parked run's step: the model's reply (an assistant message) and the results its other calls already got.
    pending: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"answer": self.answer} if self.answer else {}
        if self.pending:
            extra["pending"] = self.pending
        return extra | {
            "task": self.task,
            "run_id": self.run_id,
            "step": self.step,
            "status": self.status,
            "tools_used": list(self.tools_used),
            "findings": list(self.findings),
            "stop_reason": self.stop_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_micros": self.cost_micros,
            "usage_estimated": self.usage_estimated,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Progress:
        status = data.get("status", "idle")
        return cls(
            task=str(data.get("task", "")),
            run_id=str(data.get("run_id", "")),
            step=int(data.get("step", 0)),
            status=status if status in ("idle", "running", "parked", "stopped") else "idle",
            tools_used=tuple(str(t) for t in data.get("tools_used", ())),
            findings=tuple(str(f) for f in data.get("findings", ())),
            stop_reason=str(data.get("stop_reason", "")),
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            cost_micros=int(data.get("cost_micros", 0)),
            usage_estimated=bool(data.get("usage_estimated", False)),
            answer=str(data.get("answer", "")),
            pending=pending if isinstance(pending := data.get("pending"), dict) else {},
        )


@dataclass(frozen=True, slots=True)
class ThreadState:
    history: tuple[Message, ...] = ()
    progress: Progress = field(default_factory=Progress)


class ThreadStore(Protocol):
    """Persists a thread. ``append`` writes one step atomically and costs O(1) in history length."""

    async def load(self, thread: str) -> ThreadState: ...

    async def append(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        """Write one step: its messages, the progress and the step's tool trace records, all or nothing."""
        ...

    def append_call(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]] = ()
    ) -> Pending[None] | None:
        """``append`` not sent yet, so the next call's budget hold can share its round trip (``step_commit``);
        None when this store has no such call (then ``append`` it is)."""
        ...


class InMemoryThreadStore:
    """A ThreadStore for the terminal and for tests of the engine alone."""

    def __init__(self) -> None:
        self._threads: dict[str, ThreadState] = {}
        #: Each thread's trace records, in call order.
        self.traces: dict[str, list[dict[str, Any]]] = {}
        self._transcripts: dict[tuple[str, str], str] = {}

    async def load(self, thread: str) -> ThreadState:
        return self._threads.get(thread, ThreadState())

    async def append(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        state = self._threads.get(thread, ThreadState())
        self._threads[thread] = ThreadState(state.history + tuple(messages), progress)
        self.traces.setdefault(thread, []).extend(dict(t) for t in traces)

    def append_call(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]] = ()
    ) -> Pending[None] | None:
        return None  # nothing to share a round trip with

    async def transcript(self, thread: str, key: str) -> str | None:
        return self._transcripts.get((thread, key))

    async def keep_transcript(self, thread: str, key: str, text: str) -> None:
        self._transcripts[(thread, key)] = text
