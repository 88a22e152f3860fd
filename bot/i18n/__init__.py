"""The bot's own words in the asker's language (issue 29, item 5): the interface every stage writes through.

Wrap each text a person reads in ``_()`` (``ngettext`` for counts), with ``str.format`` placeholders, never an
f-string inside ``_()``: ``_("{n} runs are ahead of yours").format(n=3)``. Module-level texts are marked with
``N_()`` and translated where they are used (``_(TEXT)``). The locale is the asker's Slack locale (``users.info``
``locale``, e.g. ``es-ES``), set once per handler or run with ``speaking(locale)``; tasks started inside the block
inherit it. StopReason values, commands and setting names stay verbatim inside every translation.

The catalogs are the ``.po`` files under ``bot/i18n/locales/<language>/LC_MESSAGES/bot.po`` (English is the source
text), read when a language is first spoken: no compile step. ``python -m bot.i18n update`` brings them up to date
with the source (:mod:`bot.i18n.catalogs`).
"""

from __future__ import annotations

import contextlib
import functools
import gettext
import io
import pathlib
from collections.abc import Iterator
from contextvars import ContextVar

DEFAULT_LOCALE = "en"
#: Where the catalogs live: one folder per language, named by its ISO 639-1 code.
LOCALES_DIR = pathlib.Path(__file__).resolve().parent / "locales"
DOMAIN = "bot"
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


def languages() -> frozenset[str]:
    """The languages with a catalog (English, the source text, needs none)."""
    return frozenset(p.parent.parent.name for p in LOCALES_DIR.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))


@functools.lru_cache(maxsize=64)
def language_of(locale: str) -> str:
    """``es-LA`` → ``es``, ``ja-JP`` → ``ja``; a language without a catalog (``fr-FR``) → English."""
    code = locale.replace("_", "-").split("-")[0].lower()
    return code if code in languages() else DEFAULT_LOCALE


@functools.lru_cache(maxsize=16)
def _catalog(language: str) -> gettext.NullTranslations:
    """The language's catalog, read from its ``.po`` (fuzzy and empty entries are left out: English shows)."""
    if language == DEFAULT_LOCALE:
        return gettext.NullTranslations()
    # Imported here: a process nobody asks in another language never loads Babel (~50 ms with the first read).
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with (LOCALES_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po").open("rb") as po:
        catalog = read_po(po, locale=language, domain=DOMAIN)
    compiled = io.BytesIO()
    write_mo(compiled, catalog, use_fuzzy=False)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


def _translations() -> gettext.NullTranslations:
    return _catalog(language_of(_current.get()))


def _(message: str) -> str:
    """``message`` in the current locale (itself when its catalog has no translation of it)."""
    return _translations().gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return _translations().ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Marks a module-level text for the catalogs; translate it where it is used, with ``_()``."""
    return message


__all__ = ["DEFAULT_LOCALE", "N_", "_", "current_locale", "language_of", "languages", "ngettext", "speaking"]
