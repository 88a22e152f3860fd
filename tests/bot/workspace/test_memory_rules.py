"""The memory rules, one table: where each kind of memory may be used, and what counts as the asker's own words."""

from __future__ import annotations

import pytest

from bot.workspace.admin import Place
from bot.workspace.memory import Memory, parse, parse_admin, quoted, usable, visibility_of

DM, PUBLIC, PRIVATE, GROUP = Place("D1", "im"), Place("C1", "public_channel"), Place("G1", "private_channel"), \
    Place("M1", "mpim")
SHARED, UNKNOWN = Place("C9", "public_channel", external=True), Place("C8", None)


def said_in(place: Place) -> Memory:
    visibility = visibility_of(place)
    assert visibility is not None
    return Memory("M00000001", "I deploy to eu-west-3", place.channel_id, visibility, 1.0, 9e9)


@pytest.mark.parametrize(("said", "used", "allowed"), [
    (DM, DM, True), (DM, PUBLIC, False), (DM, PRIVATE, False), (DM, GROUP, False), (DM, Place("D2", "im"), True),
    (PRIVATE, PRIVATE, True), (PRIVATE, Place("G2", "private_channel"), False), (PRIVATE, PUBLIC, False),
    (PRIVATE, DM, True), (GROUP, GROUP, True), (GROUP, PUBLIC, False),
    (PUBLIC, PUBLIC, True), (PUBLIC, Place("C2", "public_channel"), True), (PUBLIC, PRIVATE, True), (PUBLIC, DM, True),
    (PUBLIC, SHARED, False), (SHARED, SHARED, True), (SHARED, PUBLIC, False), (SHARED, DM, True),
    (PUBLIC, UNKNOWN, False),
])
def test_where_a_memory_may_be_used(said: Place, used: Place, allowed: bool) -> None:
    assert usable(said_in(said), used) is allowed


def test_what_is_said_in_a_shared_or_private_place_is_private_and_an_unknown_place_keeps_nothing() -> None:
    assert [visibility_of(p) for p in (DM, PUBLIC, PRIVATE, GROUP, SHARED, UNKNOWN)] == [
        "private", "public", "private", "private", "private", None]


@pytest.mark.parametrize(("text", "kept"), [
    ("I deploy to eu-west-3.", True),
    ("i DEPLOY to   eu-west-3", True),
    ("our wiki is https://wiki.example.com", True),
    ("R&D owns it", True),
    ("the admin password is hunter2", False),
    ("I deploy to eu-west-1", False),
    ("UBOT", False),
    ("", False),
])
def test_only_the_askers_own_words_are_kept(text: str, kept: bool) -> None:
    said = ("<@UBOT> remember that I deploy to eu-west-3, our wiki is <https://wiki.example.com|wiki> and "
            "R&amp;D owns it")
    assert quoted(text, said) is kept


def test_the_grammars() -> None:
    assert parse("memory").verb == "list"  # type: ignore[union-attr]
    assert parse("memory forget all").target == "all"  # type: ignore[union-attr]
    assert parse("memory forget m1a2b3c4d").target == "M1A2B3C4D"  # type: ignore[union-attr]
    assert hasattr(parse("memory forget 12"), "problem")
    assert parse_admin("budget 5") is None and parse_admin("channel show") is None
    assert getattr(parse_admin("memory on"), "on", None) is True
    assert getattr(parse_admin("channel memory add Rota: pinned"), "value", "") == "Rota: pinned"
    assert hasattr(parse_admin("channel memory add"), "problem")
