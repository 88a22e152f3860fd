"""Longest first: the tests that take seconds start before the ones that take milliseconds.

Under ``-n 4 --dist load --maxschedchunk 1`` each worker is handed the next test as it finishes one, so the run is
a longest-first schedule: the minute-long shape tests start at once rather than last, where one of them alone
would hold the run open after the other workers are done. ``tests/durations.json`` holds the tests that took a
second or more on the 2-core machine (wall seconds); the rest keep pytest's order after them. A test missing from
the file (new, renamed) only loses its place in the queue: regenerate the file as BENCHMARKS.md's "Test suite
time" says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")


def known_durations() -> dict[str, float]:
    return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = known_durations()
    # sort() is stable: among equals (the sub-second tests, all 0 here) pytest's order, fixtures and all, stays.
    items.sort(key=lambda item: -seconds.get(item.nodeid, 0.0))
