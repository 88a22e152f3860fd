"""A run that finished just before its worker died: its end is saved before it is posted, so the answer may not be
out yet. The run's own job (a rerun, or the worker that took its lease over) posts it here and records the run."""

from __future__ import annotations

from agent_core import Progress, Stopped, StopReason, Usage
from bot.i18n import _
from bot.runs.after import AfterRun
from bot.runs.outputs import ThreadOutputs
from bot.thread import render
from bot.thread.poster import Poster
from bot.turn import Turn
from bot.workspace.settings import DisplaySettings


async def post_missing_final(
    outputs: ThreadOutputs, display: DisplaySettings, after: AfterRun, turn: Turn, progress: Progress, poster: Poster
) -> None:
    """The end of a run that finished just before a restart: the ledger, not the progress, says whether it is out."""
    ledger = outputs.ledger(turn)
    seen = await ledger.get()
    if seen.get("final") == "1":
        return
    answer = progress.answer
    reason = next((r for r in StopReason if r.value == progress.stop_reason), StopReason.ERROR)
    stopped = Stopped(
        reason, answer or _("The run ended, but its answer could not be recovered; please ask again."),
        progress.step, Usage(progress.prompt_tokens, progress.completion_tokens, 0, progress.cost_micros,
                             estimated=progress.usage_estimated),
        run_id=turn.run_id,
    )
    view = render.RunView(turn.run_id, stop_value=turn.run.value())
    sink = outputs.sink(turn, view, ledger, poster, await display.both(turn.workspace))
    sink.first_ts = seen.get("first_ts") or None
    await sink.emit(stopped)
    await after.record(turn, stopped, poster.client)
