"""LOG_FORMAT=json writes one JSON object per line with the run's fields; no format ever writes a secret."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from bot import logs
from bot.logs import log_context
from bot.settings import Settings

SECRET = "hunter2-but-longer-than-eight"
log = logging.getLogger("bot.test")


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, given back afterwards with the handlers and level pytest had set."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_the_run_fields_and_no_secret(root_logger: logging.Logger) -> None:
    out = io.StringIO()
    logs.configure("json", "INFO", [SECRET], stream=out)
    with log_context(run_id="r-1", team="T1", channel="C1", thread="1700000000.000100"):
        log.info("run started with key %s", SECRET)
        with log_context(step=3):
            try:
                raise RuntimeError(f"tool failed, token xoxb-1234-5678-abcdefgh, key {SECRET}")
            except RuntimeError:
                log.exception("step failed\nsecond line")
    log.warning("outside")

    started, failed, outside = json_lines(out)
    assert started["message"] == "run started with key [redacted]"
    assert started | {"run_id": "r-1", "team": "T1", "channel": "C1", "thread": "1700000000.000100"} == started
    assert "step" not in started and started["level"] == "INFO" and started["logger"] == "bot.test"
    assert failed["step"] == 3 and failed["run_id"] == "r-1"
    assert failed["message"] == "step failed\nsecond line"  # one line on the wire: the newline is escaped
    assert "RuntimeError: tool failed" in failed["exception"] and "Traceback" in failed["exception"]
    assert set(outside) & set(logs.CONTEXT_FIELDS) == set()
    assert SECRET not in out.getvalue() and "xoxb-1234" not in out.getvalue()
    assert len(out.getvalue().splitlines()) == 3


async def test_tasks_started_in_a_run_keep_its_fields(root_logger: logging.Logger) -> None:
    out = io.StringIO()
    logs.configure("json", "INFO", stream=out)

    async def tool_call() -> None:
        await asyncio.sleep(0)
        log.info("from a task")

    with log_context(run_id="r-2", team="T2"):
        task = asyncio.create_task(tool_call())
    await task
    (line,) = json_lines(out)
    assert line["run_id"] == "r-2" and line["team"] == "T2"


def test_text_is_the_default_human_readable_and_redacted(root_logger: logging.Logger) -> None:
    out = io.StringIO()
    logs.configure(stream=out, secrets=[SECRET])
    with log_context(run_id="r-3", team="T3"):
        log.info("calling with %s", SECRET)
    log.debug("too fine for INFO")
    (line,) = out.getvalue().splitlines()
    assert line.endswith(" INFO bot.test: calling with [redacted] [run_id=r-3 team=T3]")


def test_log_level_sets_the_threshold(root_logger: logging.Logger) -> None:
    settings = Settings(_env_file=None, log_level="warning", log_format="json")  # type: ignore[call-arg]
    out = io.StringIO()
    logs.configure(settings.log_format, settings.log_level, stream=out)
    log.info("hidden")
    log.warning("shown")
    assert [line["message"] for line in json_lines(out)] == ["shown"]


def test_configuring_twice_replaces_the_handler(root_logger: logging.Logger) -> None:
    first, second = io.StringIO(), io.StringIO()
    logs.configure("text", stream=first)
    logs.configure("json", stream=second)
    log.warning("once")
    assert first.getvalue() == "" and json_lines(second)[0]["message"] == "once"


def test_a_bad_log_setting_is_named() -> None:
    with pytest.raises(ValueError, match="log_format"):
        Settings(_env_file=None, log_format="xml")  # type: ignore[call-arg]
