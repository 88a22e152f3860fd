"""How many processes a command runs: the one setting ``python -m bot`` reads before it imports the service
(``bot.serve.prefork`` says why), and the defaults it falls back on."""

from __future__ import annotations

import os

from pydantic import Field

from bot.settings_base import Role, SettingsPiece


class ProcessCount(SettingsPiece):
    """The one setting read before the service is imported: how many workers a command runs."""

    worker_processes: int = Field(
        default=0, ge=0, description="Worker processes of `worker` and of `python -m bot` (0: one per CPU core)."
    )


def default_processes() -> int:
    """One per CPU core this process may run on."""
    if hasattr(os, "sched_getaffinity"):  # Linux: the cores this process may use, not the machine's
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def processes_for(role: Role, settings: ProcessCount) -> int:
    """How many processes ``role`` runs without ``--processes``: one receiver, ``WORKER_PROCESSES`` workers."""
    if role == "web":
        return 1
    return settings.worker_processes or default_processes()
