"""The words ``/agent-limits``' subcommands share: one choice among a closed set, one model name, and what was
typed echoed back. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from bot.workspace.settings import NAME_RE

#: The word that puts a model or a channel setting back to the next level's (the org's, the workspace's).
DEFAULT_WORD = "default"

Choice = TypeVar("Choice", bound=str)


def one_of(words: Sequence[str], choices: Sequence[Choice]) -> Choice | None:
    """The one word given (any case) when it is one of ``choices``; None for anything else."""
    word = words[0].lower() if len(words) == 1 else ""
    return next((c for c in choices if c == word), None)


def model_word(words: Sequence[str]) -> str | None:
    """The one model name given ("" for ``default``); None when ``words`` are not one name."""
    if len(words) != 1 or not NAME_RE.fullmatch(words[0]):
        return None
    return "" if words[0].lower() == DEFAULT_WORD else words[0]


def quote(text: str) -> str:
    """User text echoed inside backticks: short, and no backtick or Slack control characters to break out."""
    cleaned = text.replace("`", "'").replace("<", "‹").replace(">", "›").replace("&", "＆")
    return cleaned if len(cleaned) <= 40 else cleaned[:37] + "..."
