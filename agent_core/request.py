"""RunRequest: everything one run of ``Agent.events`` is asked to do, as one frozen value.

``agent.events(RunRequest("What is 2+2?", thread="T/C/1", cancel=token))``: the one way a run starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass

from agent_core.attachments import Attachment
from agent_core.budget import Budget
from agent_core.cancel import CancelToken
from agent_core.cost import ModelChoice
from agent_core.limits import Limits
from agent_core.store import Message, ThreadState
from tools import Registry, ToolContext


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run's inputs; every field but ``task`` falls back to the Agent's own when left out."""

    #: The user's message that starts the run (a resumed run keeps the task it was saved with).
    task: str
    _: KW_ONLY
    #: The stored conversation to load and append to (needs the Agent's ``store``); None: nothing is stored.
    thread: str | None = None
    #: The thread as the caller has just loaded it (``ThreadStore.load``), so the run does not read it again;
    #: None: the run loads it.
    loaded: ThreadState | None = None
    #: Earlier messages to put before the task, after the stored history.
    history: Sequence[Message] | None = None
    #: The run's id in progress, traces and the ``Stopped`` event; None: a fresh random one.
    run_id: str | None = None
    #: Fired from outside (a Stop button) to end the run with ``cancelled``, even mid-call.
    cancel: CancelToken | None = None
    #: The tools' view of the run (workspace, channel, Slack reader, approver, egress policy).
    scope: ToolContext | None = None
    #: This run's caps instead of the Agent's.
    limits: Limits | None = None
    #: This run's budget (e.g. the workspace's) instead of the Agent's.
    budget: Budget | None = None
    #: This run's tools instead of the Agent's registry.
    registry: Registry | None = None
    #: Pick up the thread's saved run where its last persisted step left it, when one is running.
    resume: bool = False
    #: Also yield a ``StepFinished`` after each step is persisted, for a renderer of whole steps (Slack's
    #: replies); off by default, so the terminal reads only the fine-grained events.
    finished_steps: bool = False
    #: Ask the model for its text as it writes it (``AnswerDelta``), when the Agent's LLM streams. A caller that
    #: shows only whole steps and the answer whole (Slack's replies) turns it off: one plain response per call,
    #: not a stream of chunks to parse.
    stream_text: bool = True
    #: The model this run's LLM calls name, and the price they are counted at, instead of the Agent's own.
    model: ModelChoice | None = None
    #: Instructions added after the system prompt for this run (e.g. a Slack channel's own).
    instructions: str = ""
    #: Files given with the task (checked bytes): images go to the model with the task's message, other files are
    #: listed in it and read with ``read_file`` (``agent_core.files_in``); any of them arms the exfiltration guard.
    attachments: tuple[Attachment, ...] = ()
    #: When the run's time cap starts, on the Agent's clock (e.g. when a worker claimed the run, before its
    #: downloads); None: when the run starts.
    started: float | None = None

