"""The built-in tools, and ``builtin_registry`` which registers the ones the settings enable."""

from __future__ import annotations

import dataclasses

import aiohttp

from tools.registry import Registry
from tools.settings import ToolSettings
from tools.tool import Tool

from .attach_file import attach_file
from .calculator import calculator
from .channel_history import channel_history
from .current_time import make_current_time
from .fetch_url import make_fetch_url
from .memory import forget, recall, remember
from .read_file import read_file
from .schedule_run import schedule_run
from .slack_search import slack_search
from .web_search import BraveBackend, SearchBackend, SearxngBackend, make_web_search

__all__ = ["builtin_registry"]


def builtin_registry(settings: ToolSettings, *, http: aiohttp.ClientSession | None = None) -> Registry:
    """calculator, current_time, fetch_url, channel_history, slack_search, attach_file, schedule_run, read_file,
    remember, recall, forget (offered only where memory is on), and web_search when a backend is configured.

    ``http`` is a shared session for web_search (the service's); fetch_url always opens its own per
    call, because its connections must go only to addresses the SSRF guard checked.
    """
    default = settings.agent_tool_timeout_seconds
    tools: list[Tool] = [
        dataclasses.replace(calculator, timeout_seconds=default),
        dataclasses.replace(make_current_time(), timeout_seconds=default),
        make_fetch_url(settings),
        dataclasses.replace(channel_history, timeout_seconds=default),
        dataclasses.replace(slack_search, timeout_seconds=default),
        dataclasses.replace(attach_file, timeout_seconds=default),
        dataclasses.replace(schedule_run, timeout_seconds=default),
        read_file,  # its own time limit: longer than a file's extraction limit, so that one ends first
        *(dataclasses.replace(t, timeout_seconds=default) for t in (remember, recall, forget)),
    ]
    backend = search_backend(settings)
    if backend is not None:
        tools.append(make_web_search(backend, http=http, timeout=default))
    return Registry(tools)


def search_backend(settings: ToolSettings) -> SearchBackend | None:
    """SearXNG when SEARXNG_URL is set, else Brave when its key is set, else None (no web_search)."""
    if settings.searxng_url:
        return SearxngBackend(settings.searxng_url)
    if settings.brave_search_api_key is not None:
        return BraveBackend(settings.brave_search_api_key.get_secret_value())
    return None
