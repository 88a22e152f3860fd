"""The deployment package (README: "Deploying with Docker"): the Dockerfile, compose.yaml, the Prometheus scrape
config and the Grafana dashboard agree with the service they deploy: its roles, ports, settings and the metric
names and labels its ``/metrics`` exposes. And the image's install and health check work on the real thing."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import promql_parser as promql
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from prometheus_client.parser import text_string_to_metric_families

from agent_core.events import StopReason
from bot import metrics
from bot.__main__ import main as bot_main
from bot.serve.supervisor import DRAIN_SECONDS
from bot.settings import Settings
from tests.bot.conftest import fake_slack  # noqa: F401 - the fixture, shared with the Slack app's tests
from tests.bot.service_processes import service_env
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.processes import BotProcess, RedisServer, free_port, until

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "agent-dashboard.json"
#: Series Prometheus itself writes for every target, and the labels it adds to every series it scrapes.
PROMETHEUS_SERIES = {"up": {"job", "instance"}}
TARGET_LABELS = {"job", "instance"}
#: Grafana's variables, as Prometheus would receive them after Grafana filled them in.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "6h", "$__interval": "15s"}
#: The service's own series (the test process's registry also holds prometheus-client's process metrics), and the
#: parts of a histogram or counter no panel needs.
SERVICE_PREFIXES = ("agent_", "slack_")
SUMMARY_SUFFIXES = ("_sum", "_count", "_created")


def exposed_series() -> dict[str, set[str]]:
    """Every series name ``/metrics`` shows once each fact was recorded, with its label names."""
    tag = uuid.uuid4().hex[:8]
    metrics.record_run(f"deploy-{tag}", steps=0)
    metrics.record_llm_call("ok", seconds=0.1)
    metrics.record_tool_call(f"deploy_{tag}", "ok", seconds=0.1)
    metrics.record_spend(f"T{tag}", micros=1)
    metrics.set_budget_remaining(f"T{tag}", micros=1)
    metrics.record_slack_call(f"deploy.{tag}", "rate_limited")
    metrics.observe_ack(0.001)
    metrics.record_schedule("fired")
    with metrics.run_in_progress():
        text = metrics.render(queue_depth=3, multiproc_dir=None).decode()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series | PROMETHEUS_SERIES


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def targets() -> list[tuple[str, str, str]]:
    """(panel title, expr, legend) of every query of every panel."""
    return [(panel["title"], target["expr"], target.get("legendFormat", ""))
            for panel in dashboard()["panels"] for target in panel.get("targets", [])]


@dataclass
class Query:
    """What one PromQL expression reads: (metric, label matchers) per selector, the functions and aggregations it
    applies, the labels its aggregations keep, its number literals."""

    selectors: list[tuple[str, list[tuple[str, promql.MatchOp, str]]]] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)
    numbers: list[float] = field(default_factory=list)
    aggregates: bool = False


def read(expr: str) -> Query:
    """``expr`` as Prometheus would parse it once Grafana filled in its variables (ValueError when it cannot)."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    query = Query()

    def visit(node: promql.Expr) -> None:
        if isinstance(node, promql.VectorSelector):
            assert node.name, f"a selector without a metric name: {expr}"
            query.selectors.append((node.name, [(m.name, m.op, m.value) for m in node.matchers.matchers]))
        elif isinstance(node, promql.AggregateExpr):
            query.functions.append(str(node.op))
            query.aggregates = True
            if node.modifier is not None:
                assert node.modifier.type == promql.AggModifierType.By, f"only `by` is checked: {expr}"
                query.grouping.update(node.modifier.labels)
        elif isinstance(node, promql.Call):
            query.functions.append(node.func.name)
        elif isinstance(node, promql.NumberLiteral):
            query.numbers.append(node.val)

    promql.walk(promql.parse(expr), visit)
    return query


def problems(expr: str, legend: str, series: dict[str, set[str]]) -> list[str]:
    """What in one query does not match the exposed series: names, matched and grouped labels, legend labels,
    stop reasons."""
    query = read(expr)
    found = []
    labels = set(TARGET_LABELS)
    for metric, matchers in query.selectors:
        if metric not in series:
            found.append(f"no series {metric!r}")
            continue
        labels |= series[metric]
        for label, op, value in matchers:
            if label not in series[metric] | TARGET_LABELS:
                found.append(f"{metric} has no label {label!r}")
            exact = op in (promql.MatchOp.Equal, promql.MatchOp.NotEqual)
            if label == "stop_reason" and exact and value not in set(StopReason):
                found.append(f"no stop reason {value!r}")
    found += [f"no label {name!r} to group by" for name in sorted(query.grouping - labels)]
    # An aggregation keeps only the labels it groups by.
    kept = query.grouping if query.aggregates else labels
    shown = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    found += [f"the legend shows {name!r}, which the query does not keep" for name in sorted(shown - kept)]
    return found


def test_every_dashboard_query_reads_series_and_labels_the_service_exposes() -> None:
    series = exposed_series()
    found = [(title, expr, problem) for title, expr, legend in targets() for problem in problems(expr, legend, series)]
    assert not found, "\n".join(f"{title}: {problem}\n    {expr}" for title, expr, problem in found)
    used = {metric for _, expr, _ in targets() for metric, _ in read(expr).selectors}
    # Everything the service exposes has a panel (its _sum/_count/_created series aside).
    assert {n for n in series if n.startswith(SERVICE_PREFIXES) and not n.endswith(SUMMARY_SUFFIXES)} <= used


def test_the_checker_catches_a_wrong_name_label_grouping_or_legend() -> None:
    series = exposed_series()
    assert problems('sum by (reason) (rate(agent_run_total{stop_reason="eror"}[5m]))', "{{reason}}", series) == [
        "no series 'agent_run_total'", "no label 'reason' to group by"]
    assert problems('rate(agent_runs_total{stop_reason="eror", team="x"}[5m])', "", series) == [
        "no stop reason 'eror'", "agent_runs_total has no label 'team'"]
    assert problems("sum(rate(agent_spend_usd_total[5m]))", "{{team}}", series) == [
        "the legend shows 'team', which the query does not keep"]
    with pytest.raises(ValueError, match="unknown function with name 'rates'"):
        read("rates(agent_runs_total[5m])")


def test_the_dashboard_has_the_panels_on_call_needs() -> None:
    queries = [(title, read(expr)) for title, expr, _ in targets()]

    def panel(metric: str, *, functions: frozenset[str] = frozenset(), grouping: str = "",
              matcher: tuple[str, promql.MatchOp, str] | None = None) -> list[str]:
        return [title for title, q in queries
                if any(m == metric and (matcher is None or matcher in ms) for m, ms in q.selectors)
                and functions <= set(q.functions) and (not grouping or grouping in q.grouping)]

    rates = frozenset({"rate"})
    needs = {
        "runs by stop reason": panel("agent_runs_total", functions=rates, grouping="stop_reason"),
        "runs ending in error": panel("agent_runs_total", matcher=("stop_reason", promql.MatchOp.Equal, "error")),
        "queue depth": panel("agent_queue_depth"),
        "runs in flight": panel("agent_runs_in_progress"),
        "spend": panel("agent_spend_usd_total", functions=rates),
        "Slack 429s": panel("slack_rate_limited_total", functions=rates),
        "LLM failures": panel("agent_llm_calls_total", grouping="outcome"),
        "processes up": panel("up"),
    }
    assert not [need for need, titles in needs.items() if not titles], needs
    quantiles = {n for _, q in queries for n in q.numbers[:1]
                 if "histogram_quantile" in q.functions and q.selectors[0][0] == "agent_llm_latency_seconds_bucket"}
    assert quantiles == {0.5, 0.95, 0.99}


def test_the_dashboard_imports_with_a_prometheus_input_and_its_panels_do_not_overlap() -> None:
    board = dashboard()
    assert isinstance(board["schemaVersion"], int)
    assert [(i["name"], i["type"], i["pluginId"]) for i in board["__inputs"]] == [
        ("DS_PROMETHEUS", "datasource", "prometheus")]
    # The variable of the same name makes ${DS_PROMETHEUS} resolve when the file is provisioned, not imported.
    assert {v["name"]: v["type"] for v in board["templating"]["list"]}["DS_PROMETHEUS"] == "datasource"
    queried = [p for p in board["panels"] if p["type"] != "row"]
    assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in queried for t in [p, *p["targets"]])
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    cells = [(x, y, p["title"]) for p in board["panels"] for g in [p["gridPos"]]
             for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])]
    assert all(x < 24 for x, _, _ in cells)
    taken: dict[tuple[int, int], str] = {}
    for x, y, title in cells:
        assert taken.setdefault((x, y), title) == title, f"{title!r} overlaps {taken[x, y]!r}"
    series = exposed_series()
    variable = {v["name"]: v for v in board["templating"]["list"]}["job"]["definition"]
    metric, label = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable).groups()  # type: ignore[union-attr]
    assert metric in series and label in TARGET_LABELS


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(word.upper(), rest.strip()) for word, _, rest in (line.partition(" ") for line in lines)]


def roles(capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The roles ``python -m bot --help`` accepts."""
    with pytest.raises(SystemExit):
        bot_main(["--help"])
    found = re.search(r"\{([\w,]+)\}", capsys.readouterr().out)
    assert found is not None
    return set(found.group(1).split(","))


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "compose.yaml").read_text()))


def test_the_image_runs_python_m_bot_with_a_role_it_accepts_as_a_user_not_root(
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps = dockerfile()
    said = {word: [rest for w, rest in steps if w == word] for word in {w for w, _ in steps}}
    assert json.loads(said["ENTRYPOINT"][-1]) == ["python", "-m", "bot"]
    accepted = roles(capsys)
    assert {"web", "worker"} <= accepted and set(json.loads(said["CMD"][-1])) <= accepted
    assert said["USER"][-1].split(":")[0] not in ("root", "0")
    # The base image is pinned to a release, and the image installs every package the project has.
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11\.\d+-slim-\w+", said["ARG"][0])
    copied = {rest.split()[0] for rest in said["COPY"]}
    assert {"agent_core", "tools", "bot", "pyproject.toml"} <= copied
    # The health check runs the script the image copies from deploy/.
    script = json.loads(said["HEALTHCHECK"][-1].split("CMD", 1)[1])[-1]
    assert f"deploy/healthcheck.py {script}" in said["COPY"]
    services = compose()["services"]
    assert {services[name]["command"][0] for name in ("web", "worker")} <= accepted
    env = services["web"]["environment"]
    assert {int(env[k]) for k in ("PORT", "WORKER_HEALTH_PORT", "METRICS_PORT")} <= {
        int(p) for p in said["EXPOSE"][-1].split()}


def test_the_image_installs_the_tested_versions_and_they_satisfy_every_declared_range() -> None:
    """A new major of a dependency (openai, mcp) cannot reach a fresh image untested: the image installs with
    constraints.txt, which pins every package of the install within the ranges pyproject.toml declares."""
    steps = dockerfile()
    installs = [rest for word, rest in steps if word == "RUN" and "pip install" in rest]
    assert installs and all("-c constraints.txt" in rest for rest in installs), installs
    assert any(rest.split()[0] == "constraints.txt" or " constraints.txt " in f" {rest} "
               for word, rest in steps if word == "COPY")
    pins = {canonicalize_name(name): Version(version) for name, version in (
        line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#"))}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in map(Requirement, declared):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is declared but constraints.txt does not pin it"
        assert pins[name] in requirement.specifier, f"constraints.txt pins {name} {pins[name]}, outside {requirement}"
        assert not list(requirement.specifier.filter([Version("999")])) or name == "tzdata", (
            f"{requirement} has no upper bound: a new major would reach a fresh install untested")


def test_compose_runs_redis_web_and_scalable_workers_that_meet_in_redis_on_ports_of_their_own() -> None:
    spec = compose()
    services = spec["services"]
    assert {"redis", "web", "worker"} <= set(services)
    assert services["web"]["command"] == ["web"] and services["worker"]["command"] == ["worker"]
    redis = services["redis"]
    assert "--appendonly" in redis["command"] and redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") and v.split(":")[0] in spec["volumes"] for v in redis["volumes"])
    assert "healthcheck" in redis
    settings = {name.upper() for name in Settings.model_fields}
    for name in ("web", "worker"):
        service = services[name]
        env = service["environment"]
        assert set(env) <= settings, f"{name}: not a setting: {set(env) - settings}"
        assert re.fullmatch(r"redis://redis:6379/\d+", env["REDIS_URL"])
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["env_file"] == ".env" and service["restart"] == "unless-stopped"
        # Runs in flight get the supervisor's drain before Docker's SIGKILL.
        assert int(service["stop_grace_period"].rstrip("s")) > DRAIN_SECONDS
        assert env["PORT"] != env["WORKER_HEALTH_PORT"] != env["METRICS_PORT"] != env["PORT"]
    assert [p.split(":")[-1] for p in services["web"]["ports"]] == [services["web"]["environment"]["PORT"]]
    # --scale worker=N: no published port or fixed name for replicas to fight over.
    assert "ports" not in services["worker"] and "container_name" not in services["worker"]


def test_prometheus_scrapes_the_web_and_every_worker_replica_where_compose_serves_metrics() -> None:
    services = compose()["services"]
    port = services["web"]["environment"]["METRICS_PORT"]
    assert services["worker"]["environment"]["METRICS_PORT"] == port
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert jobs["agent-web"]["static_configs"][0]["targets"] == [f"web:{port}"]
    assert jobs["agent-worker"]["dns_sd_configs"][0] == {**jobs["agent-worker"]["dns_sd_configs"][0],
                                                         "names": ["worker"], "type": "A", "port": int(port)}
    mounts = [v.split(":")[0] for s in ("prometheus", "grafana") for v in services[s]["volumes"]]
    assert all((ROOT / m).exists() for m in mounts if m.startswith("./"))
    assert "./deploy/grafana/agent-dashboard.json" in mounts


def healthcheck_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("env", [{}, {"PORT": "4000"}, {"PORT": "4000", "WORKER_HEALTH_PORT": "5000"}])
def test_the_health_check_asks_the_ports_the_service_listens_on(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings(_env_file=None)
    assert healthcheck_module().ports(env) == [settings.listen_port("web")[1], settings.listen_port("worker")[1]]


async def check(env: dict[str, str]) -> int:
    """The image's HEALTHCHECK command's exit code, run with a container's environment."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "deploy" / "healthcheck.py"), env={"PATH": env.get("PATH", ""), **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return await process.wait()


async def test_the_health_check_passes_for_a_running_web_and_worker_and_fails_when_either_stops_serving(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI,  # noqa: F811
) -> None:
    async with RedisServer(tmp_path / "redis") as redis:
        env = service_env(fake_slack, fake_openai, redis.url)
        # As in compose.yaml: one .env, each role in its own container; nothing listens on the worker's PORT.
        web_env = env
        worker_env = {**env, "PORT": str(free_port())}
        async with BotProcess("web", web_env, tmp_path / "web.log") as web, \
                BotProcess("worker", worker_env, tmp_path / "worker.log") as worker:
            await web.wait_healthy()
            await worker.wait_healthy()
            assert (await check(web_env), await check(worker_env)) == (0, 0)
            assert await worker.stop() == 0
            assert (await check(web_env), await check(worker_env)) == (0, 1)
            await redis.kill()

            async def unhealthy() -> bool:
                return await check(web_env) == 1

            await until(unhealthy, what="the web's health check to fail with Redis gone")


def test_the_image_install_carries_every_file_of_the_packages(tmp_path: Path) -> None:
    """The Dockerfile installs a wheel of the project (not an editable checkout): every tracked file of the
    three packages must be in it, message catalogs included."""
    tracked = subprocess.run(["git", "ls-files", "agent_core", "tools", "bot"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    source = tmp_path / "src"
    for name in [*tracked, "pyproject.toml", "README.md"]:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path / "out"),
                    str(source)], check=True, capture_output=True)
    wheel = next((tmp_path / "out").glob("*.whl"))
    assert set(tracked) - set(zipfile.ZipFile(wheel).namelist()) == set()
