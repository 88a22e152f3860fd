"""The ``processes`` marker: tests that start real processes, left out of the quick loop ``-m "not processes"``.

Marked here by node id (a module, or one test of a module) rather than in each file. A test that starts a process
(``subprocess``, asyncio's subprocesses, ``os.fork``...) without the marker fails, so the quick loop stays quick
and the list stays right: the interpreter's audit events name every process start.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest

#: Node id prefixes of the tests that start processes (their own redis-server, ``python -m bot``, MCP servers...).
PROCESS_TESTS = (
    "tests/shapes/",
)

_STARTS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"}
#: Processes the current test started (the audit hook appends, the autouse fixture reads and clears).
_started: list[str] = []
_own = False


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event in _STARTS and not _own:
        _started.append(f"{event} {str(args[:2])[:160]}")


sys.addaudithook(_audit)


@contextlib.contextmanager
def starting_own_process() -> Iterator[None]:
    """A process the test machinery starts for every test (the session's embedded Redis): not the test's own."""
    global _own
    _own = True
    try:
        yield
    finally:
        _own = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(PROCESS_TESTS):
            item.add_marker(pytest.mark.processes)


@pytest.fixture(autouse=True)
def processes_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that started a process but is not marked ``processes``."""
    _started.clear()
    yield
    if _started and request.node.get_closest_marker("processes") is None:
        pytest.fail(f"started {len(_started)} process(es) without the `processes` marker, first {_started[0]}: "
                    "add the test to PROCESS_TESTS in tests/process_tests.py", pytrace=False)
