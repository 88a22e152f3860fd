"""One evaluation, start to end: the fakes, Redis, the endpoint (the scripted models on the fake one, or the
configured one), every run, and the scores. ``python -m bot eval`` (``evalkit.cli``) and the tests call it.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from agent_core import usd_to_micros
from bot.embedded_redis import EmbeddedRedis
from bot.settings import Settings
from evalkit.cases import Case
from evalkit.harness import SECRET, Evaluation, Result, Spend
from evalkit.scripted import SCRIPTED_MODELS, ScriptedModels
from evalkit.world import RunSpec, World, world
from tests.fakes.openai_server import FakeOpenAI

#: The guard modes the injection cases run under (the golden set runs at the deployment's default, ``on``).
INJECTION_GUARDS = ("on", "off")


@dataclass
class Endpoint:
    """Where the models are: ``base_url`` None is the fake endpoint with the scripted models."""

    base_url: str | None = None
    api_key: str = "sk-fake"
    #: ``AGENT_MODELS`` entries: ``name`` or ``name:prompt/completion`` (USD per 1M tokens).
    models: list[str] = field(default_factory=lambda: list(SCRIPTED_MODELS))

    @property
    def names(self) -> list[str]:
        """The models' names, without a price (``llama3:8b:0.10/0.20`` is ``llama3:8b``)."""
        return [priced["name"] if (priced := _PRICED.fullmatch(m)) else m for m in self.models]


@dataclass
class Options:
    k: int = 1
    concurrency: int = 4
    max_usd: Decimal | None = None
    turn_timeout: float = 120.0
    redis_url: str | None = None
    key_prefix: str = field(default_factory=lambda: f"eval{uuid.uuid4().hex[:8]}")
    #: Per-run cost cap (``AGENT_MAX_COST_USD``), also what ``--max-usd`` holds for a run before it starts.
    run_cap_usd: Decimal = Decimal("0.50")
    progress: Callable[[int, int, int], None] = lambda done, total, spent: None
    extra_settings: dict[str, Any] = field(default_factory=dict)


#: Settings the harness's own deployment never takes from the environment, whatever the operator's shell holds: it
#: talks only to its fakes (no Socket Mode, no OAuth, no Sentinel, no exporters); the engine's settings (AGENT_MAX_*,
#: OPENAI_TIMEOUT...) do apply, as they would to the channel's runs.
_NOT_FROM_ENV: dict[str, Any] = {
    "slack_app_token": None, "slack_client_id": None, "slack_client_secret": None, "slack_token_encryption_key": None,
    "redis_sentinels": "", "redis_sentinel_master": "", "metrics_port": None, "worker_health_port": None,
    "otel_exporter_otlp_endpoint": "",
}
_PRICED = re.compile(r"(?P<name>.+):[0-9]+(?:\.[0-9]+)?/[0-9]+(?:\.[0-9]+)?(?:/[0-9]+(?:\.[0-9]+)?)?")


def plan(cases: list[Case], models: list[str], k: int) -> list[RunSpec]:
    """Every case × model × try at the default guard; injection cases once more with the guard off."""
    specs = [RunSpec(c, m, a) for c in cases for m in models for a in range(k)]
    specs += [RunSpec(c, m, a, "off") for c in cases if c.injection for m in models for a in range(k)]
    return specs


def settings_factory(w: World, endpoint: Endpoint, base_url: str, options: Options,
                     redis_url: str) -> Callable[[str], Settings]:
    mcp = w.mcp_config()
    made: dict[str, Settings] = {}

    def build(guard: str) -> Settings:
        if guard not in made:
            made[guard] = Settings(
                _env_file=None, slack_bot_token="xoxb-eval", slack_signing_secret=SECRET,
                slack_api_url=w.slack.base_url, redis_url=redis_url, redis_key_prefix=options.key_prefix,
                arq_queue_name=f"{options.key_prefix}:queue", host="127.0.0.1", port=0, slack_posts_per_second=0,
                slack_updates_per_minute=0, slack_max_retry_after_seconds=1, openai_api_key=endpoint.api_key,
                openai_base_url=base_url, openai_max_retries=1,
                agent_models=",".join(endpoint.models), worker_max_jobs=max(options.concurrency, 1),
                fetch_url_allowed_hosts=[w.pages.host_port, w.attacker_host], agent_mcp_config=str(mcp),
                agent_exfiltration_guard=guard, agent_max_cost_usd=options.run_cap_usd, agent_budget_usd="",
                agent_mcp_startup_wait_seconds=60, agent_tools=[], **_NOT_FROM_ENV, **options.extra_settings)
        return made[guard]

    return build


@contextlib.asynccontextmanager
async def _redis(url: str | None, folder: Path) -> AsyncIterator[str]:
    if url:
        yield url
        return
    embedded = await EmbeddedRedis.start(folder / "redis")
    try:
        yield embedded.url
    finally:
        await embedded.stop()


async def evaluate(cases: list[Case], endpoint: Endpoint, options: Options) -> list[Result]:
    """Run the plan and return every run's judged result. The caller owns nothing afterwards: the fakes, the
    embedded Redis (when no ``redis_url``) and the run's keys are gone."""
    with tempfile.TemporaryDirectory(prefix="eval-") as tmp:
        folder = Path(tmp)
        async with world(folder) as w, _redis(options.redis_url, folder) as redis_url, \
                contextlib.AsyncExitStack() as stack:
            base_url = endpoint.base_url
            if base_url is None:
                fake = FakeOpenAI()
                await fake.start()
                stack.push_async_callback(fake.close)
                fake.script = ScriptedModels(cases, w.fill_value)
                base_url = fake.base_url
            redis = Redis.from_url(redis_url)
            stack.push_async_callback(_forget, redis, options.key_prefix)
            cap = None if options.max_usd is None else usd_to_micros(options.max_usd, setting="--max-usd")
            spend = Spend(cap, usd_to_micros(options.run_cap_usd, setting="--run-cap"))
            evaluation = Evaluation(w, settings_factory(w, endpoint, base_url, options, redis_url), redis,
                                    options.concurrency, options.turn_timeout, spend, options.progress)
            return await evaluation.run(plan(cases, endpoint.names, options.k))


async def _forget(redis: Redis, prefix: str) -> None:
    """The evaluation's keys deleted, the connection closed."""
    keys = [key async for key in redis.scan_iter(match=f"*{prefix}*", count=1000)]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()
