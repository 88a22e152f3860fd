"""Shape: ``python -m bot`` (its default process count) given a ``REDIS_URL`` it cannot use stops before it starts
any process, with exit code 2 and one line naming ``REDIS_URL``: no child's traceback, no error once per child."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.processes import free_port
from tests.shapes.harness import Tree, free_port_pair
from tests.shapes.test_shapes import settings

#: Short, so the test does not sit through the default 20 s an operator's Redis gets to come up.
WAIT_SECONDS = "1"


@pytest.mark.parametrize("case", ["nothing listens there", "no scheme"])
async def test_python_m_bot_with_a_bad_redis_url_says_so_in_one_line_before_starting_anything(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, trees: list[Tree], case: str,
) -> None:
    port = free_port()  # claimed for this test, and nothing binds it
    url = f"redis://127.0.0.1:{port}/0" if case == "nothing listens there" else f"127.0.0.1:{port}"
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": "xoxb-shape",
           "REDIS_URL": url, "REDIS_STARTUP_WAIT_SECONDS": WAIT_SECONDS, "LOG_FORMAT": "text"}
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    code, lines = await tree.exited()

    assert code == 2, lines
    errors = [line for line in lines if line.startswith("error:") or " ERROR " in line]
    assert len(errors) == 1 and errors[0].startswith("error: REDIS_URL"), lines
    assert not any("Traceback" in line or "started (pid" in line for line in lines), lines
    if case == "no scheme":
        assert lines == errors  # nothing to wait for: the one line is all
    else:
        assert len(lines) <= 2, lines  # at most a line saying it waits for Redis, then the error
