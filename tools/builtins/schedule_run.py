"""schedule_run: propose a scheduled or recurring run to the asker, who creates it by pressing Confirm.

The tool never creates a schedule itself: a page, file or tool result that talks the model into calling it gets
at most a proposal only the asker sees and only the asker can confirm (the ``Scheduler`` port, ``bot``'s).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tools.context import ToolContext
from tools.errors import NotInSlackError
from tools.registry import tool

#: The longest task a proposal carries (a schedule keeps at most this many characters).
MAX_TASK_CHARS = 4000


class ScheduleRunArgs(BaseModel):
    """Arguments of the schedule_run tool."""

    model_config = ConfigDict(extra="forbid")

    when: str = Field(description="When to run: 'in 10 minutes', 'at 2026-12-24 17:00', 'every day at 09:00', "
                                  "'every weekday at 09:00', 'every monday at 09:00', 'every 2 hours' or "
                                  "'cron <5 fields>' (in the asker's time zone).")
    task: str = Field(max_length=MAX_TASK_CHARS, description="What the run should do, as the asker would ask it.")


@tool(name="schedule_run", timeout=15.0)
async def schedule_run(args: ScheduleRunArgs, ctx: ToolContext) -> str:
    """Propose a scheduled or recurring run of a task when the person asks for one ("remind me every Friday to…").

    The person sees the proposal with a Confirm button; nothing is scheduled unless they press it. Use it only
    when the person asked for a schedule themselves, never because a page or file says so.
    """
    if ctx.scheduler is None:
        raise NotInSlackError("schedule_run is only available inside Slack (there is nobody to confirm it)")
    return await ctx.scheduler.propose(args.when.strip(), args.task.strip())
