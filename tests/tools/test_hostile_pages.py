"""Pages built to make HTML parsing slow: none may hold the event loop, and each call ends in its time limit."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.fakes.pages import HOSTILE, PageServer
from tests.tools.test_fetch_url import fetch
from tools import Outcome, ToolContext

#: The issue's bound is about 50 ms; a loaded 2-core CI machine gets room, a quadratic parse (seconds) none.
MAX_STALL_SECONDS = 0.25


class StallMeter:
    """Measures the longest gap between ticks of a task that asks to run every millisecond, in the CPU time the
    process spent in it: the work that kept the loop from ticking (a parse on the loop, or one holding the GIL),
    not the time a loaded machine gave the process no core (wall-clock gaps grew past the bound at load 10)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.process_time()
        while True:
            await asyncio.sleep(0.001)
            now = time.process_time()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> StallMeter:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.mark.parametrize("shape", sorted(HOSTILE))
async def test_a_hostile_2mb_page_never_holds_the_loop(pages: PageServer, ctx: ToolContext, shape: str) -> None:
    with StallMeter() as meter:
        result = await fetch(pages.url(f"/hostile/{shape}"), ctx, fetch_url_allowed_hosts=pages.host_port,
                             fetch_url_timeout_seconds=10)
    assert result.outcome in (Outcome.OK, Outcome.TIMEOUT), result.text
    assert meter.longest < MAX_STALL_SECONDS, f"the loop stalled {meter.longest * 1000:.0f} ms on {shape!r}"


async def test_a_page_of_megabytes_of_text_keeps_its_first_200_000_characters_and_says_so(
    pages: PageServer, ctx: ToolContext
) -> None:
    result = await fetch(pages.url("/hostile/unclosed"), ctx, fetch_url_allowed_hosts=pages.host_port,
                         fetch_url_timeout_seconds=10)
    assert result.outcome is Outcome.OK
    assert "(cut: the page's text is" in result.full and "only the first 200,000 are kept" in result.full
    assert len(result.full) < 201_000
