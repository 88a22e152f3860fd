"""Fixtures of the shapes suite: the fakes (as the Slack app's tests have them) and the trees a test starts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.bot.conftest import fake_slack  # noqa: F401 - the fixture, shared with the Slack app's tests
from tests.shapes.harness import Tree


@pytest.fixture
async def trees() -> AsyncIterator[list[Tree]]:
    """Process trees a test starts; killed at the end if the test did not stop them."""
    started: list[Tree] = []
    yield started
    for tree in started:
        await tree.kill()
