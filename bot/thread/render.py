"""Pure rendering: an agent event (or a finished step) → Slack messages (blocks + fallback text). No I/O.

The thread shape (``full`` verbosity):

1. on ``RunStarted``: a short "working on it" reply carrying the Stop button;
2. one reply per step: the thought, each tool call (name, arguments as code) and its observation (shortened);
3. on ``Stopped``: the answer (split over as many replies as it needs; past ``AGENT_ANSWER_FILE_CHARS`` its first
   lines, the whole being uploaded as a file: ``filed_answer_messages``) and a footer with the stop reason
   verbatim (``final_answer``) beside human words, steps, tokens and cost; the first reply is edited once to
   drop its Stop button.

``compact`` verbosity edits the first reply per step (``live_status``) instead of posting step replies.
Every text that came from the model or a tool goes through ``bot.thread.mrkdwn`` (escaped, no pings).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import ContextActionsBlock, FeedbackButtonObject, FeedbackButtonsElement

from agent_core import Observed, RunStarted, StepFinished, Stopped, StopReason, ToolCalled, format_usd
from bot.i18n import N_, _, ngettext
from bot.thread import mrkdwn, stop_text
from bot.thread.uploads import ANSWER_FILE_NAME, Filed
from bot.turn import join_id, split_id

#: action_id of the Stop button (matched by bot.receive.listeners.actions).
STOP_ACTION_ID = "agent_stop"
#: action_id of the thumbs up / down buttons on an answer (matched by bot.receive.listeners.feedback).
FEEDBACK_ACTION_ID = "agent_feedback"
#: Characters of a thought, of a call's arguments and of an observation shown in a step reply.
THOUGHT_LIMIT = 2_500
ARGUMENTS_LIMIT = 1_200
OBSERVATION_LIMIT = 1_500
#: Block text per message; Slack's cap is near 12,000 (``msg_blocks_too_long``): stay well below it.
MESSAGE_TEXT_LIMIT = 8_000
#: Blocks per message; Slack allows 50.
MESSAGE_BLOCK_LIMIT = 40
#: chat.update rejects a text over about 4,000 bytes: live status edits stay far below.
UPDATE_TEXT_LIMIT = 1_500
#: The first lines of an answer uploaded as a file, shown above the note that it is attached.
PREVIEW_CHARS = 700
PREVIEW_LINES = 8

#: The human words beside each stop reason (the reason itself is shown verbatim); translated where shown.
STOP_WORDS: dict[StopReason, str] = {
    StopReason.FINAL_ANSWER: N_("answered"),
    StopReason.MAX_STEPS: N_("step limit reached"),
    StopReason.MAX_TOKENS: N_("token limit reached"),
    StopReason.MAX_COST: N_("cost limit reached"),
    StopReason.NO_PROGRESS: N_("stopped: no progress"),
    StopReason.DANGEROUS_LOOP: N_("stopped a repeating risky action"),
    StopReason.BUDGET_EXHAUSTED: N_("workspace budget used up"),
    StopReason.BUDGET_BUSY: N_("workspace budget busy"),
    StopReason.CANCELLED: N_("stopped on request"),
    StopReason.ERROR: N_("failed"),
    StopReason.MAX_TIME: N_("time limit reached"),
    StopReason.REFUSED: N_("the model declined"),
    StopReason.CUT_OFF: N_("answer cut off"),
}


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """One message to post or edit: ``text`` is the notification and screen-reader fallback."""

    text: str
    blocks: tuple[dict[str, Any], ...] = ()
    #: Message metadata (``{"event_type", "event_payload"}``): the run's outcome on its final message.
    metadata: dict[str, Any] | None = None


#: One finished step as the engine sends it once persisted: its thought, tool calls and observations.
Step = StepFinished


@dataclass(frozen=True, slots=True)
class RunView:
    """What rendering needs to know about the run beyond the event itself."""

    run_id: str
    #: The Stop button's value: names the thread and the run, so any web process can route the press.
    stop_value: str
    max_steps: int = 0
    #: What the run uses, said in its first reply (its model and its channel's instructions).
    about: str = ""


def started(event: RunStarted, view: RunView) -> SlackMessage:
    text = (_(":hourglass_flowing_sand: Working on it (resuming at step {step}). I'll post each step in this thread.")
            .format(step=event.step + 1) if event.step
            else _(":hourglass_flowing_sand: Working on it. I'll post each step in this thread."))
    if view.about:
        text += f"\n{view.about}"
    return SlackMessage(text, (section(text), stop_button(view)))


def stop_button(view: RunView) -> dict[str, Any]:
    return {
        "type": "actions",
        "block_id": "agent_run_controls",
        "elements": [{
            "type": "button", "action_id": STOP_ACTION_ID, "style": "danger",
            "text": {"type": "plain_text", "text": _("Stop")}, "value": view.stop_value,
        }],
    }


def step_messages(step: Step) -> list[SlackMessage]:
    sections: list[str] = []
    if step.thought:
        sections.append(":thought_balloon: " + mrkdwn.to_mrkdwn(mrkdwn.shorten(step.thought, THOUGHT_LIMIT)))
    observed = {o.call_id: o for o in step.observations}
    for call in step.calls:
        sections.append(call_text(call))
        if call.call_id in observed:
            sections.append(observation_text(observed.pop(call.call_id)))
    sections.extend(observation_text(o) for o in observed.values())
    return pack(_("*Step {n}*").format(n=step.step), sections or [_("(no output)")])


def call_text(call: ToolCalled) -> str:
    args = json.dumps(call.arguments, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    head = _(":hammer_and_wrench: Calling {tool}").format(tool=mrkdwn.inline_code(call.tool))
    return head + "\n" + mrkdwn.code_block(mrkdwn.shorten(args, ARGUMENTS_LIMIT))


def observation_text(obs: Observed) -> str:
    icon = ":mag:" if obs.outcome == "ok" else ":warning:"
    head = f"{icon} {mrkdwn.inline_code(obs.tool)} → {mrkdwn.escape(obs.outcome)} ({size_text(obs)})"
    return head + "\n" + mrkdwn.code_block(mrkdwn.shorten(obs.text, OBSERVATION_LIMIT))


def size_text(obs: Observed) -> str:
    """``1,234 chars, 0.3s``: how much a tool returned, and how long it took."""
    size = _("{n} chars").format(n=f"{obs.full_chars:,}")
    return size + (f", {obs.duration_ms / 1000:.1f}s" if obs.duration_ms else "")


def stop_summary(event: Stopped) -> str:
    """``Stop reason: `final_answer` (answered) · 3 steps · 1,200 tokens · $0.0012``: every display ends with it."""
    usage = event.usage
    cost = format_usd(usage.cost_micros)
    return _("Stop reason: `{reason}` ({words}) · {steps} · {tokens} tokens · {cost}").format(
        reason=event.reason.value, words=stop_words(event.reason),
        steps=ngettext("{n} step", "{n} steps", event.steps).format(n=event.steps),
        tokens=f"{usage.total_tokens:,}", cost=_("{cost} (estimate)").format(cost=cost) if usage.estimated else cost,
    )


def stop_words(reason: StopReason) -> str:
    """The human words beside a stop reason, in the current locale."""
    return _(STOP_WORDS[reason]) if reason in STOP_WORDS else str(reason)


def stop_line(event: Stopped) -> str:
    """``final_answer`` verbatim beside human words, then steps, tokens and cost, then what stopped it."""
    line = stop_summary(event)
    if detail := stop_text.detail(event):
        line += f"\n{mrkdwn.escape(detail)}"
    if hint := raise_hint(event):
        line += f"\n{hint}"
    return line


#: The ``/agent-limits`` command that raises the per-run cap a run stopped at.
RAISED_WITH: dict[StopReason, str] = {
    StopReason.MAX_STEPS: "/agent-limits max-steps <n>",
    StopReason.MAX_TOKENS: "/agent-limits max-tokens <n>",
    StopReason.MAX_COST: "/agent-limits max-cost <usd>",
}


def raise_hint(event: Stopped) -> str:
    """Under a run a per-run cap stopped: who can raise it, and how (the engine knows no Slack commands)."""
    command = RAISED_WITH.get(event.reason)
    return _("Workspace admins can raise this limit with `{command}`.").format(command=command) if command else ""


def final_messages(
    event: Stopped, view: RunView | None = None, *, answer: str | None = None, note: str = ""
) -> list[SlackMessage]:
    """The answer (``answer``: what of it to show, when not all) and the stop line; ``note``: a line of the app's
    own under it. With ``view``, the last message carries the feedback buttons."""
    text = (stop_text.answer(event) if answer is None else answer) or _("(no answer)")
    shown = [mrkdwn.to_mrkdwn(text), *([note] if note else [])]
    messages = pack(None, shown, footer=stop_line(event))
    if view is not None:
        last = messages[-1]
        messages[-1] = SlackMessage(last.text, (*last.blocks, feedback_block(view)))
    return messages


def preview(answer: str) -> str:
    """The first lines of an answer too long for messages (whole lines; a code block it opens is closed)."""
    lines: list[str] = []
    size = 0
    for line in answer.strip().splitlines():
        if lines and (size + len(line) > PREVIEW_CHARS or len(lines) >= PREVIEW_LINES):
            lines.append("…")
            break
        lines.append(line[:PREVIEW_CHARS])
        size += len(line) + 1
    if sum(line.lstrip().startswith("```") for line in lines) % 2:
        lines.insert(len(lines) - (lines[-1] == "…"), "```")
    return "\n".join(lines)


def filed_answer_messages(event: Stopped, view: RunView | None, filed: Filed) -> list[SlackMessage]:
    """An answer put in a file or a canvas: its first lines, a note saying where, the stop line."""
    chars = f"{filed.chars:,}"
    note = (_(":page_facing_up: The full answer ({chars} characters) is in <{url}|this canvas>.").format(
        chars=chars, url=filed.canvas_url) if filed.canvas_url
        else _(":page_facing_up: The full answer ({chars} characters) is attached as `{name}`.").format(
            chars=chars, name=ANSWER_FILE_NAME))
    return final_messages(event, view, answer=preview(stop_text.answer(event)), note=note)


def unattached_file(name: str, content: str) -> list[SlackMessage]:
    """A file Slack would not take as a file, as messages instead (nothing the model handed over is lost)."""
    header = _(":paperclip: {name} (could not be attached as a file)").format(name=mrkdwn.inline_code(name))
    return pack(header, [mrkdwn.code_block(content)])


def feedback_block(view: RunView) -> dict[str, Any]:
    """Thumbs up / down under an answer; each value names the vote, the thread and the run (see ``parse_vote``)."""
    buttons = FeedbackButtonsElement(
        action_id=FEEDBACK_ACTION_ID,
        positive_button=FeedbackButtonObject(
            text="👍", accessibility_label=_("Good answer"), value=join_id("up", view.stop_value)
        ),
        negative_button=FeedbackButtonObject(
            text="👎", accessibility_label=_("Bad answer"), value=join_id("down", view.stop_value)
        ),
    )
    return ContextActionsBlock(block_id="agent_feedback", elements=[buttons]).to_dict()


def parse_vote(value: str) -> tuple[str, str, str]:
    """``(vote, thread, run_id)`` of a feedback button's value; raises ValueError when it is not one of ours."""
    vote, thread, run_id = split_id(value, "vote|thread|run")
    if vote not in ("up", "down"):
        raise ValueError("not a feedback button value")
    return vote, thread, run_id


def finished_header(event: Stopped) -> SlackMessage:
    """The edit of the first reply once the run ended: same place, no Stop button."""
    icon = ":white_check_mark:" if event.reason is StopReason.FINAL_ANSWER else ":octagonal_sign:"
    text = _("{icon} Finished: `{reason}` ({words})").format(
        icon=icon, reason=event.reason.value, words=stop_words(event.reason))
    return SlackMessage(text, (section(text),))


def live_status(step: Step, view: RunView, *, steps_done: int) -> SlackMessage:
    """``compact`` verbosity: the first reply, edited to show the latest step (stays under chat.update's cap)."""
    last = ", ".join(
        f"{mrkdwn.inline_code(o.tool)} → {mrkdwn.escape(o.outcome)}" for o in step.observations
    ) or _("thinking")
    working = (_(":hourglass_flowing_sand: Working… step {n} of {max} · last: {last}") if view.max_steps
               else _(":hourglass_flowing_sand: Working… step {n} · last: {last}"))
    text = mrkdwn.shorten(working.format(n=steps_done, max=view.max_steps, last=last), UPDATE_TEXT_LIMIT)
    return SlackMessage(text, (section(text), stop_button(view)))


def error_message(what: str) -> SlackMessage:
    text = f":x: {mrkdwn.escape(what)}"
    return SlackMessage(mrkdwn.shorten(text, UPDATE_TEXT_LIMIT), (section(mrkdwn.shorten(text, 2_900)),))


def notice(text: str) -> SlackMessage:
    """A short message of the app's own (never model text)."""
    return SlackMessage(text, (section(text),))


def pack(header: str | None, sections: list[str], *, footer: str | None = None) -> list[SlackMessage]:
    """Lay sections out as section blocks (each ≤ 3,000 chars) over as few messages as Slack's caps allow."""
    pieces = [piece for text in sections for piece in mrkdwn.split(text, mrkdwn.SECTION_LIMIT - 100)]
    messages: list[SlackMessage] = []
    blocks: list[dict[str, Any]] = []
    texts: list[str] = []
    if header:
        blocks.append(section(header))
        texts.append(header)
    for piece in pieces:
        if blocks and (sum(map(len, texts)) + len(piece) > MESSAGE_TEXT_LIMIT or len(blocks) >= MESSAGE_BLOCK_LIMIT):
            messages.append(SlackMessage("\n".join(texts), tuple(blocks)))
            blocks, texts = [], []
        blocks.append(section(piece))
        texts.append(piece)
    if footer:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": footer[:2_900]}]})
        texts.append(footer)
    messages.append(SlackMessage("\n".join(texts), tuple(blocks)))
    return messages


def section(text: str) -> dict[str, Any]:
    """A Block Kit section of mrkdwn ``text`` (the run's replies, the approval requests)."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}
