"""ToolSettings: defaults, environment names, comma lists, JSON overrides, secrets, start-up errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.tools.conftest import make_settings
from tools import ToolPolicy, ToolSettings, builtin_registry


def test_defaults() -> None:
    s = make_settings()
    assert s.agent_observation_max_chars == 4000
    assert s.agent_tool_timeout_seconds == 20
    assert s.agent_tool_timeouts == {}
    assert s.agent_tools == [] and s.allowlist() is None
    assert s.fetch_url_allowed_hosts == []
    assert (s.fetch_url_max_bytes, s.fetch_url_timeout_seconds, s.fetch_url_max_redirects) == (
        2_000_000,
        10,
        5,
    )
    assert s.searxng_url is None and s.brave_search_api_key is None
    assert s.agent_exfiltration_guard == "on"
    assert s.secrets() == []


def test_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_OBSERVATION_MAX_CHARS", "8000")
    monkeypatch.setenv("AGENT_TOOL_TIMEOUT_SECONDS", "5")
    monkeypatch.setenv("AGENT_TOOL_TIMEOUTS", '{"fetch_url": 15}')
    monkeypatch.setenv("AGENT_TOOLS", "calculator, fetch_url,,")
    monkeypatch.setenv("FETCH_URL_ALLOWED_HOSTS", "127.0.0.1:8080,10.0.0.0/8")
    monkeypatch.setenv("FETCH_URL_MAX_BYTES", "1000")
    monkeypatch.setenv("FETCH_URL_TIMEOUT_SECONDS", "3.5")
    monkeypatch.setenv("FETCH_URL_MAX_REDIRECTS", "0")
    monkeypatch.setenv("SEARXNG_URL", "http://searx.local/")
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "brave-secret-key-1")
    monkeypatch.setenv("AGENT_EXFILTRATION_GUARD", "approve")
    s = ToolSettings(_env_file=None)  # type: ignore[call-arg]
    assert s.agent_exfiltration_guard == "approve"
    assert s.agent_observation_max_chars == 8000
    assert s.agent_tool_timeout_seconds == 5
    assert s.agent_tool_timeouts == {"fetch_url": 15.0}
    assert s.allowlist() == ["calculator", "fetch_url"]
    assert s.fetch_url_allowed_hosts == ["127.0.0.1:8080", "10.0.0.0/8"]
    assert (s.fetch_url_max_bytes, s.fetch_url_timeout_seconds, s.fetch_url_max_redirects) == (1000, 3.5, 0)
    assert s.searxng_url == "http://searx.local"
    assert s.secrets() == ["brave-secret-key-1"]
    assert "brave-secret-key-1" not in repr(s)


def test_dotenv_file_is_read(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("AGENT_TOOLS=calculator\nSOMETHING_ELSE=ignored\n")
    assert ToolSettings(_env_file=env).allowlist() == ["calculator"]  # type: ignore[call-arg]


def test_empty_optional_values_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARXNG_URL", "")
    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", " ")
    s = ToolSettings(_env_file=None)  # type: ignore[call-arg]
    assert s.searxng_url is None and s.brave_search_api_key is None


@pytest.mark.parametrize(
    ("values", "name"),
    [
        ({"agent_tool_timeouts": {"fetch_url": 0}}, "AGENT_TOOL_TIMEOUTS"),
        ({"searxng_url": "searx.local"}, "SEARXNG_URL"),
        ({"fetch_url_allowed_hosts": "10.0.0.0/40"}, "FETCH_URL_ALLOWED_HOSTS"),
        ({"agent_exfiltration_guard": "sometimes"}, "guard\n  Input should be 'on', 'approve' or 'off'"),
    ],
)
def test_bad_values_fail_naming_the_setting(values: dict[str, object], name: str) -> None:
    with pytest.raises(ValidationError, match=name):
        make_settings(**values)


def test_every_setting_is_documented() -> None:
    for field_name, info in ToolSettings.model_fields.items():
        assert info.description, field_name


def test_builtin_registry_uses_the_settings() -> None:
    s = make_settings(agent_tool_timeout_seconds=7, fetch_url_timeout_seconds=4)
    registry = builtin_registry(s)
    assert registry.names() == [
        "calculator", "current_time", "fetch_url", "channel_history", "slack_search", "attach_file", "schedule_run",
        "read_file", "remember", "recall", "forget",
    ]
    assert not any(t.dangerous or t.needs_approval for t in registry)
    timeouts = {t.name: t.timeout_seconds for t in registry}
    # read_file keeps its own limit, longer than a file's extraction limit (tools.builtins.read_file)
    assert timeouts == {
        "calculator": 7, "current_time": 7, "fetch_url": 4, "channel_history": 7, "slack_search": 7, "attach_file": 7,
        "schedule_run": 7, "read_file": 30, "remember": 7, "recall": 7, "forget": 7,
    }
    assert ToolPolicy(make_settings(agent_tools="calculator,nope").allowlist()).enabled(registry).names() == [
        "calculator"
    ]
