"""Every text the bot says is in every catalog, translated with the same placeholders; and every text is written
so that it can be (``_()`` over a literal, never an f-string)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from bot.i18n import DEFAULT_LOCALE, _, language_of, languages, speaking
from bot.i18n.catalogs import UPDATE_COMMAND, extract, gaps, po_path

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The languages the bot ships besides English (issue 29: at least two).
SHIPPED = {"es", "ja"}


def test_the_shipped_languages_have_catalogs() -> None:
    assert SHIPPED <= languages()


@pytest.mark.parametrize("language", sorted(SHIPPED))
def test_the_catalog_translates_every_text_of_the_source(language: str) -> None:
    missing = gaps(language, extract())
    assert not missing, (
        f"{len(missing)} texts lack a {language} translation in {po_path(language).relative_to(ROOT)}. Run "
        f"`{UPDATE_COMMAND}`, then fill in each empty msgstr (keep {{placeholders}}, commands, setting names and "
        "stop reasons as they are):\n" + "\n".join(map(str, missing))
    )


def test_the_source_has_texts_to_translate() -> None:
    ids = {m.id for m in extract() if m.id}
    assert {"Stop", ("{n} step", "{n} steps")} <= ids | {tuple(i) for i in ids if isinstance(i, list)}


def _texts_built_in_the_call() -> list[str]:
    """``_(f"...")``, ``_("a" + b)``, ``_("{x}".format(x=1))``: texts no catalog could hold. A name or a lookup
    (``_(TEXT)``, ``_(STOP_WORDS[reason])``) is a text marked with ``N_`` where it is defined."""
    found = []
    for path in (ROOT / "bot").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in MARKERS:
                texts = node.args[:MARKERS[node.func.id]]
                if any(isinstance(a, (ast.JoinedStr, ast.BinOp, ast.Call)) for a in texts):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


MARKERS = {"_": 1, "N_": 1, "ngettext": 2}


def test_translated_texts_are_literals_never_built_strings() -> None:
    assert _texts_built_in_the_call() == []


@pytest.mark.parametrize(("slack_locale", "language"), [
    ("es-ES", "es"), ("es-LA", "es"), ("ja-JP", "ja"), ("en-US", DEFAULT_LOCALE), ("en-GB", DEFAULT_LOCALE),
    ("fr-FR", DEFAULT_LOCALE), ("", DEFAULT_LOCALE),
])
def test_slack_locales_map_to_a_catalog_or_english(slack_locale: str, language: str) -> None:
    assert language_of(slack_locale) == language
    with speaking(slack_locale):
        assert (_("Stop") == "Stop") == (language == DEFAULT_LOCALE)
