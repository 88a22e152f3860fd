"""The catalogs kept in step with the source: every ``_()``, ``ngettext`` and ``N_()`` text of ``bot/`` extracted
(Babel), each language's ``.po`` updated with it, and what a catalog still lacks.

``python -m bot.i18n update`` (after adding or changing texts) adds the new texts to every catalog with an empty
translation and drops the ones no longer used; ``python -m bot.i18n update fr`` starts a French catalog.
``tests/test_i18n_catalogs.py`` fails, naming each text, while a catalog lacks one.
"""

from __future__ import annotations

import pathlib
import string
from collections.abc import Iterable
from dataclasses import dataclass

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from bot.i18n import DOMAIN, LOCALES_DIR, languages

#: The source scanned: the bot's own words are all in ``bot/`` (the engine and the tools speak to the model).
SOURCE_DIR = LOCALES_DIR.parent.parent
UPDATE_COMMAND = "python -m bot.i18n update"


def po_path(language: str) -> pathlib.Path:
    return LOCALES_DIR / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def extract() -> Catalog:
    """Every text of ``bot/`` marked for translation, with where it is used (a translator's context)."""
    template = Catalog(domain=DOMAIN, project="slack-agent", charset="utf-8")
    for filename, lineno, message, comments, context in extract_from_dir(
        SOURCE_DIR, comment_tags=("i18n:",), strip_comment_tags=True,
    ):
        template.add(message, locations=[(f"bot/{filename}", lineno)], auto_comments=comments, context=context)
    return template


def update(new_languages: Iterable[str] = ()) -> list[pathlib.Path]:
    """Each catalog (and ``new_languages``' new ones) brought in line with the source; returns the files written."""
    template = extract()
    written = []
    for language in sorted(languages() | set(new_languages)):
        path = po_path(language)
        if path.exists():
            with path.open("rb") as po:
                catalog = read_po(po, locale=language, domain=DOMAIN)
        else:
            catalog = Catalog(locale=language, domain=DOMAIN, project="slack-agent", charset="utf-8")
        # No fuzzy matching: a near-miss guess would hide a text nobody translated.
        catalog.update(template, no_fuzzy_matching=True, update_creation_date=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as po:
            write_po(po, catalog, width=120, ignore_obsolete=True, include_lineno=False, sort_output=True)
        written.append(path)
    return written


@dataclass(frozen=True, slots=True)
class Gap:
    """A text a catalog does not translate well: missing, untranslated, fuzzy, or with other placeholders."""

    language: str
    msgid: str
    problem: str

    def __str__(self) -> str:
        return f"{self.language}: {self.msgid!r}: {self.problem}"


def placeholders(text: str) -> set[str]:
    """``{n}`` and ``{who}`` of a ``str.format`` text."""
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def _forms(text: object) -> tuple[str, ...]:
    """A message's id or translation as its forms (one, or a plural's several)."""
    return tuple(str(t or "") for t in text) if isinstance(text, (tuple, list)) else (str(text or ""),)


def _fields(texts: Iterable[str]) -> set[str]:
    """The placeholders of a text, or of all the forms of a plural one (its singular may leave ``{n}`` out)."""
    return set().union(*map(placeholders, texts))


def gaps(language: str, template: Catalog | None = None) -> list[Gap]:
    """What ``language``'s catalog lacks against the source."""
    template = template or extract()
    with po_path(language).open("rb") as po:
        catalog = read_po(po, locale=language, domain=DOMAIN)
    found: list[Gap] = []
    for message in template:
        if not message.id:
            continue
        ids = _forms(message.id)
        entry = catalog.get(message.id, message.context)
        strings = _forms(entry.string) if entry else ()
        if entry is None:
            problem = "not in the catalog"
        elif not all(strings):
            problem = "no translation"
        elif entry.fuzzy:
            problem = "marked fuzzy"
        elif _fields(strings) != _fields(ids):
            problem = f"placeholders differ: {sorted(_fields(ids))} in English"
        else:
            continue
        found.append(Gap(language, ids[0], problem))
    return found
