"""How a channel's settings reach its run: the instructions added to the system prompt, and the line of the run's
first reply that says which model and channel instructions it used. Pure."""

from __future__ import annotations

from bot.i18n import _
from bot.markup import escape

#: Characters of the channel's instructions quoted in a run's first reply (the whole is in ``channel show``).
ABOUT_PROMPT_CHARS = 120


def instructions_of(prompt: str) -> str:
    """The channel's instructions as the model reads them, after the system prompt ("" when it has none)."""
    if not prompt:
        return ""
    return _("Instructions for this Slack channel, set by its admins:") + "\n" + prompt


def about_run(model: str, prompt: str) -> str:
    """``Model: `gpt-4o` · channel instructions: "Answer as ..."`` for the run's first reply."""
    if not prompt:
        return _("Model: `{model}`").format(model=model)
    one_line = " ".join(prompt.split())
    if len(one_line) > ABOUT_PROMPT_CHARS:
        one_line = one_line[:ABOUT_PROMPT_CHARS - 1] + "…"
    return _("Model: `{model}` · channel instructions: “{prompt}”").format(model=model, prompt=escape(one_line))
