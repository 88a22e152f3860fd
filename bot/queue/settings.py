"""``QueueSettings``: the queue stage's piece of ``Settings``, and the slice a worker is built from."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bot.runs.settings import RunsSettings

DEFAULT_QUEUE_NAME = "agent:queue"


class QueueSettings(RunsSettings):
    """The arq queue of agent runs and the worker processes that take them."""

    arq_queue_name: str = Field(default=DEFAULT_QUEUE_NAME, min_length=1, description="arq queue of agent runs.")
    worker_max_jobs: int = Field(
        default=50, gt=0, description="Agent runs one worker process runs at once (each mostly waits on the LLM)."
    )
    worker_event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop", description="Event loop of `worker` processes: uvloop (less CPU per step) or asyncio."
    )
    agent_schedule_tick_seconds: float = Field(
        default=5.0, gt=0, le=60, description="How often each worker's schedule clock looks for due fires."
    )
