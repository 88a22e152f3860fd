"""Start-up checks, through real ``python -m bot`` processes: a setting a role cannot start with is one line
naming it and exit 2, before any child process, embedded Redis or listener starts; never a restart loop.

The default process count is exercised as on a 2-core host (``python -m bot`` and ``worker`` supervise).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_core import ConfigError
from bot.serve import startup
from bot.settings import Settings
from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.conftest import session_redis_url
from tests.processes import free_port
from tests.shapes.harness import Tree

#: A process refusing its settings exits within its interpreter's start: seconds, even on a loaded machine.
EXIT_TIMEOUT = 90.0


def env(tmp_path: Path, **changes: str | None) -> dict[str, str]:
    """Settings a process would start with (loopback, nothing answering Slack or the LLM), then ``changes``
    (None removes one)."""
    values: dict[str, str | None] = {
        "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "OPENAI_API_KEY": "sk-test-startup",
        "REDIS_URL": session_redis_url(), "REDIS_KEY_PREFIX": "startup-test", "HOST": "127.0.0.1",
        "PORT": str(free_port()), "DATA_DIR": str(tmp_path / "data"), **changes,
    }
    return {name: value for name, value in values.items() if value is not None}


async def refused(argv: list[str], settings: dict[str, str], folder: Path) -> list[str]:
    """Run ``python -m bot ARGV`` on two cores; it must exit 2. Every line it wrote."""
    tree = Tree(argv, folder, env=settings)
    tree.start()
    try:
        code, output = await tree.exited(EXIT_TIMEOUT)
    finally:
        await tree.kill()  # still running after the timeout: restarting forever, the defect itself
    assert code == 2, output[-20:]
    return output


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    """Another program listening on a port of 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


@pytest.mark.parametrize("argv", [[], ["worker"]], ids=["python -m bot", "worker"])
async def test_a_missing_openai_key_is_one_line_before_any_process_starts(argv: list[str], tmp_path: Path) -> None:
    # Before: the web process listened, then every worker failed in turn.
    output = await refused(argv, env(tmp_path, OPENAI_API_KEY=None), tmp_path)
    assert output == ["error: OPENAI_API_KEY is not set: set it to the API key of your OpenAI-compatible endpoint"]


async def test_an_agent_models_price_cut_short_is_one_line_before_any_process_starts(tmp_path: Path) -> None:
    # Before: it started, priced `gpt-4o-mini:0.15` as gpt-4o and sent that name to the provider.
    output = await refused([], env(tmp_path, AGENT_MODELS="gpt-4o-mini:0.15"), tmp_path)
    assert output == ["error: AGENT_MODELS: 'gpt-4o-mini:0.15' is not a whole price: write `name:prompt/completion` "
                      "or `name:prompt/completion/cached` (USD per 1M tokens), e.g. `gpt-4o-mini:0.15/0.60`"]


async def test_a_transcription_model_without_a_price_is_one_line_before_any_process_starts(tmp_path: Path) -> None:
    output = await refused(["worker"], env(tmp_path, OPENAI_TRANSCRIBE_MODEL="my-whisper"), tmp_path)
    assert output == ["error: No price known for transcription model 'my-whisper': set "
                      "OPENAI_TRANSCRIBE_PRICE_PER_MINUTE (USD per minute of audio) so budgets count it"]


@pytest.mark.parametrize("role", ["web", "worker"])
async def test_web_or_worker_without_redis_url_refuse_before_starting_an_embedded_redis(
    role: str, tmp_path: Path
) -> None:
    output = await refused([role], env(tmp_path, REDIS_URL=None), tmp_path)
    assert len(output) == 1 and output[0].startswith("error: REDIS_URL is not set:"), output
    assert not (tmp_path / "data").exists()  # no embedded server was started to be refused afterwards


async def test_a_taken_port_stops_python_m_bot_with_one_line_instead_of_restarting_the_web_process(
    tmp_path: Path, listening: socket.socket
) -> None:
    port = listening.getsockname()[1]
    output = await refused([], env(tmp_path, PORT=str(port), WORKER_HEALTH_PORT="0"), tmp_path)
    assert output == [f"error: PORT {port} is already in use on 127.0.0.1: another process listens there; "
                      "stop it or set PORT to a free port"]


async def test_a_taken_worker_health_port_stops_the_workers_with_one_line(
    tmp_path: Path, listening: socket.socket
) -> None:
    port = listening.getsockname()[1]
    output = await refused(["worker"], env(tmp_path, WORKER_HEALTH_PORT=str(port)), tmp_path)
    assert output == [f"error: WORKER_HEALTH_PORT {port} is already in use on 127.0.0.1: another process listens "
                      "there; stop it or set WORKER_HEALTH_PORT to a free port"]


@pytest.mark.parametrize("role", ["web", "worker"])
async def test_a_supervised_child_on_a_taken_port_exits_2_with_one_line(
    role: str, tmp_path: Path, listening: socket.socket
) -> None:
    # What each child of the supervisor runs; its exit 2 stops the supervisor (tests/bot/serve/test_supervisor.py).
    # Before: a traceback and exit 1, which the supervisor restarted forever.
    port = str(listening.getsockname()[1])
    output = await refused([role, "--processes", "1"], env(tmp_path, PORT=port, WORKER_HEALTH_PORT=port), tmp_path)
    name = "PORT" if role == "web" else "WORKER_HEALTH_PORT"
    assert output == [f"error: {name} {port} is already in use on 127.0.0.1: another process listens there; "
                      f"stop it or set {name} to a free port"]


def test_the_workers_health_port_defaults_to_the_port_after_port_and_never_to_port() -> None:
    assert Settings(_env_file=None, port=3000).listen_port("worker") == ("WORKER_HEALTH_PORT", 3001)
    assert Settings(_env_file=None, port=0).listen_port("worker") == ("WORKER_HEALTH_PORT", 0)
    assert Settings(_env_file=None, port=3000, worker_health_port=9100).listen_port("worker")[1] == 9100
    assert Settings(_env_file=None, port=3000).listen_port("web") == ("PORT", 3000)
    with pytest.raises(ConfigError, match="WORKER_HEALTH_PORT is not set and PORT is 65535"):
        Settings(_env_file=None, port=65535).listen_port("worker")


def test_python_m_bot_refuses_one_port_for_the_web_and_the_workers(tmp_path: Path) -> None:
    port = free_port()
    values = env(tmp_path, PORT=str(port), WORKER_HEALTH_PORT=str(port))
    settings = Settings(_env_file=None, **{name.lower(): value for name, value in values.items()})
    with pytest.raises(ConfigError, match=f"WORKER_HEALTH_PORT is PORT \\({port}\\)"):
        startup.check(settings, "all", supervisor=True)
    startup.check(settings, "all")  # one process serves both on PORT: nothing to share


def test_an_empty_bot_token_line_means_oauth_mode(tmp_path: Path) -> None:
    # .env.example's `SLACK_BOT_TOKEN=` left empty beside the OAuth settings: before, "SLACK_BOT_TOKEN is not set".
    env_file = tmp_path / ".env"
    env_file.write_text("SLACK_BOT_TOKEN=\nSLACK_CLIENT_ID=111.222\n")
    settings = Settings(_env_file=env_file)  # type: ignore[call-arg]
    assert settings.oauth_mode and settings.slack_bot_token is None
