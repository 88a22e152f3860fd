"""The suite's order: the tests known to take seconds first, longest first; every other test after them, in
pytest's order (which keeps a module's fixtures together)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests import ordering


@dataclass
class _Item:
    nodeid: str


def test_known_long_tests_come_first_longest_first_and_the_rest_keep_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ordering, "known_durations", lambda: {"t::slow": 3.0, "t::slowest": 60.0})
    items = [_Item(name) for name in ("t::a", "t::slow", "t::b", "t::slowest", "t::c")]
    ordering.pytest_collection_modifyitems(cast(Any, None), cast(Any, items))
    assert [item.nodeid for item in items] == ["t::slowest", "t::slow", "t::a", "t::b", "t::c"]


def test_the_durations_file_is_seconds_by_node_id() -> None:
    known = ordering.known_durations()
    assert known and all("::" in nodeid and seconds >= 1.0 for nodeid, seconds in known.items())
