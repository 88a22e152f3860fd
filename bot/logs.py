"""Log set-up: human-readable lines by default, or one JSON object per line carrying the run's fields.

``configure(format, level, secrets)`` installs one handler on the root logger; every record it writes is
redacted (the configured secrets and token shapes), whatever the format. The run's fields (run id,
workspace, channel, thread, step) come from a context variable that ``log_context`` sets, so any logger,
ours or a library's, gets them on records made while a run is being handled::

    with log_context(run_id=run.id, team=team, channel=channel, thread=thread_ts):
        ...
        with log_context(step=3):
            log.info("tool call")   # {"message": "tool call", "run_id": ..., "step": 3, ...}

Context variables follow ``asyncio`` tasks: a task created inside the block keeps the fields.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import IO, Any, Literal

from pydantic import Field, field_validator

from bot.settings_base import SettingsPiece
from tools import Redactor

LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
DEFAULT_LOG_FORMAT: LogFormat = "text"
DEFAULT_LOG_LEVEL: LogLevel = "INFO"
#: The fields ``log_context`` sets, in the order they are written.
CONTEXT_FIELDS = ("run_id", "team", "channel", "thread", "step")
#: The record attribute holding them.
CONTEXT_ATTRIBUTE = "context"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogSettings(SettingsPiece):
    """The kernel's logging piece: the log lines and the audit stream of every process."""

    log_format: LogFormat = Field(
        default=DEFAULT_LOG_FORMAT, description="text: human-readable lines; json: one JSON object per line."
    )
    log_level: LogLevel = Field(default=DEFAULT_LOG_LEVEL, description="Lowest level logged (DEBUG ... CRITICAL).")
    audit_log: str = Field(
        default="stdout",
        description="The audit stream (bot/audit.py): stdout, off, or a file path (one JSON line per event).",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_name(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

_NO_FIELDS: Mapping[str, str | int] = MappingProxyType({})
_context: ContextVar[Mapping[str, str | int]] = ContextVar("log_context", default=_NO_FIELDS)


@contextlib.contextmanager
def log_context(
    *,
    run_id: str | None = None,
    team: str | None = None,
    channel: str | None = None,
    thread: str | None = None,
    step: int | None = None,
) -> Iterator[None]:
    """Add the given fields to every record logged inside the block (nested blocks add to the outer ones)."""
    given = {"run_id": run_id, "team": team, "channel": channel, "thread": thread, "step": step}
    token = _context.set({**_context.get(), **{k: v for k, v in given.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Puts the current ``log_context`` fields on each record, as ``record.context``.

    One attribute rather than one per field: ``LogRecord`` already has a ``thread`` (the OS thread's id).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, CONTEXT_ATTRIBUTE):
            setattr(record, CONTEXT_ATTRIBUTE, _context.get())
        return True


def _fields(record: logging.LogRecord) -> dict[str, str | int]:
    given: Mapping[str, str | int] = getattr(record, CONTEXT_ATTRIBUTE, {})
    return {name: given[name] for name in CONTEXT_FIELDS if name in given}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context fields, and the exception text."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        data.update(_fields(record))
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        # Redacted before encoding, so JSON escapes cannot hide a secret from the redactor.
        return json.dumps(self.redactor.redact_data(data), ensure_ascii=False, default=str)


#: Control characters (and Unicode's line and paragraph separators) a message may not write raw: a name holding a
#: newline would otherwise start a line of its own, looking like another record.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, 0x85)} | {
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"}
#: Before each line of a traceback or stack under a record: only a record's own first line starts a line.
CONTINUATION = "    "


def one_line(text: str) -> str:
    """``text`` with every control character escaped (``\\n``, ``\\x1b``, ...)."""
    return text.translate(_CONTROLS)


class TextFormatter(logging.Formatter):
    """The human-readable line, with the context fields appended when there are any, redacted. The message is one
    line whatever its values hold; a traceback under it is indented."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__(TEXT_FORMAT)
        self.redactor = redactor

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(logging.makeLogRecord({**record.__dict__, "message": one_line(record.message)}))

    def format(self, record: logging.LogRecord) -> str:
        head, newline, rest = super().format(record).partition("\n")
        fields = [f"{name}={one_line(str(value))}" for name, value in _fields(record).items()]
        if fields:
            head = f"{head} [{' '.join(fields)}]"
        if rest:
            rest = "\n".join(CONTINUATION + line for line in rest.split("\n"))
        return self.redactor.redact(f"{head}{newline}{rest}")


class _OurHandler(logging.StreamHandler[IO[str]]):
    """Marks the handler ``configure`` installed, so a second call replaces it instead of adding another."""


def configure(
    format: LogFormat = DEFAULT_LOG_FORMAT,
    level: LogLevel | int = DEFAULT_LOG_LEVEL,
    secrets: Iterable[str] = (),
    *,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send every log record to ``stream`` (stderr) in ``format`` at ``level`` and above, with ``secrets`` redacted."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    handler = _OurHandler(stream if stream is not None else sys.stderr)
    redactor = Redactor(secrets)
    handler.setFormatter(JsonFormatter(redactor) if format == "json" else TextFormatter(redactor))
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    root.setLevel(level)
    return handler


#: The same noisy message (e.g. accept() out of file descriptors) is logged at most once per this many s.
LOG_EVERY_SECONDS = 10.0


class OncePer:
    """Lets a message through at most once per ``seconds`` per key, counting what it held back."""

    def __init__(self, seconds: float = LOG_EVERY_SECONDS) -> None:
        self.seconds = seconds
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def allow(self, key: str) -> tuple[bool, int]:
        """(whether to log now, how many were held back since the last one)."""
        now = time.monotonic()
        if now - self._last.get(key, -self.seconds) >= self.seconds:
            self._last[key] = now
            return True, self._held.pop(key, 0)
        self._held[key] = self._held.get(key, 0) + 1
        return False, 0
