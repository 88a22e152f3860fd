"""The bot's own words in the asker's language (issue 29, item 5): the interface every stage writes through.

Wrap each text a person reads in ``_()`` (``ngettext`` for counts), with ``str.format`` placeholders, never an
f-string inside ``_()``: ``_("{n} runs are ahead of yours").format(n=3)``. Module-level texts are marked with
``N_()`` and translated where they are used (``_(TEXT)``). The locale is the asker's, set once per handler or
run with ``speaking(locale)``; StopReason values and commands stay verbatim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

DEFAULT_LOCALE = "en"
_current: ContextVar[str] = ContextVar("bot_locale", default=DEFAULT_LOCALE)


def current_locale() -> str:
    return _current.get()


@contextlib.contextmanager
def speaking(locale: str | None) -> Iterator[None]:
    """Texts made inside the block are in ``locale`` (a Slack locale such as ``es-ES``; None: English)."""
    token = _current.set(locale or DEFAULT_LOCALE)
    try:
        yield
    finally:
        _current.reset(token)


def _(message: str) -> str:
    """``message`` in the current locale (English until the catalogs land)."""
    return message


def ngettext(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural


def N_(message: str) -> str:
    """Marks a module-level text for the catalogs; translate it where it is used, with ``_()``."""
    return message
