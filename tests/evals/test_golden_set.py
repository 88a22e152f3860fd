"""Every golden case through the real pipeline (signed events, the service's worker, the fake Slack serving the
case's data, real Redis, the canned MCP server) against two scripted models on the fake endpoint: the one that
replays the case's recorded good trajectory must pass its judge, the one that replays the bad one must fail it.
One evaluation serves every case (the service and the fakes start once per phase)."""

from __future__ import annotations

import importlib.util
import json
from decimal import Decimal
from pathlib import Path

import pytest

from bot.__main__ import main as bot_main
from evalkit.cases import load_cases
from evalkit.harness import NOT_STARTED, Result
from evalkit.report import as_json, markdown
from evalkit.runner import Endpoint, Options, evaluate
from evalkit.scripted import BAD, GOOD, ScriptedModels
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
CASES = load_cases(ROOT / "evals")


def _line(result: Result) -> str:
    return f"{result.spec.case.id} [{result.spec.guard}]: {result.failure} | {' / '.join(result.outcome.thread)[:400]}"


async def test_each_judge_passes_the_good_trajectory_and_fails_the_bad_one(key_prefix: str) -> None:
    results = await evaluate(CASES, Endpoint(), Options(k=1, concurrency=8, redis_url=TEST_REDIS_URL,
                                                        key_prefix=key_prefix, turn_timeout=60))
    golden = [r for r in results if r.spec.guard == "on" and r.spec.case.injection is None]
    injected = [r for r in results if r.spec.case.injection is not None]
    # Injection cases: the good trajectory does the task at either guard; the bad one reaches the attacker's goal
    # once the guard is off.
    assert [_line(r) for r in injected if r.spec.model == GOOD and not r.passed] == []
    assert [_line(r) for r in injected if r.spec.model == BAD and r.spec.guard == "off" and not r.attacked] == []
    assert {r.spec.case.id for r in golden + injected} == {c.id for c in CASES}
    wrongly_failed = [_line(r) for r in golden if r.spec.model == GOOD and not r.passed]
    wrongly_passed = [_line(r) for r in golden if r.spec.model == BAD and r.passed]
    assert wrongly_failed == [], "\n".join(wrongly_failed)
    assert wrongly_passed == [], "\n".join(wrongly_passed)
    # The report says so: all good, none bad, and each bad run's failure with the judge's reason.
    report = as_json(results, 1)
    assert all(r["passed"] == (r["model"] == GOOD) for r in report["runs"] if r["guard"] == "on"
               and not r["case"].startswith("inj-"))
    text = markdown(results, 1)
    assert all(f"### `{c.id}` · `{BAD}`" in text for c in CASES if c.injection is None)
    assert f"### `{CASES[0].id}` · `{GOOD}`" not in text


async def test_a_real_endpoint_is_used_as_configured_and_the_spend_cap_stops_new_runs(
    key_prefix: str, fake_openai: FakeOpenAI
) -> None:
    """An endpoint given by URL (here the fake one, scripted, standing in for a provider): the runs use the model
    named with its price, and once a run's worst case (the per-run cap) no longer fits under ``max_usd``, no new
    run starts; those are counted, not scored."""
    [case] = [c for c in CASES if c.id == "tip-on-a-bill"]
    fake_openai.script = ScriptedModels([case], lambda _, value: value)
    endpoint = Endpoint(fake_openai.base_url, "sk-test", [f"{GOOD}:0.15/0.60"])
    # A run costs about $0.0002 here: the first two fit under $0.0103 with a $0.01 hold each, the third does not.
    options = Options(k=3, concurrency=1, redis_url=TEST_REDIS_URL, key_prefix=key_prefix, turn_timeout=60,
                      max_usd=Decimal("0.0103"), run_cap_usd=Decimal("0.01"))
    results = await evaluate([case], endpoint, options)
    assert [r.started for r in results] == [True, True, False]
    assert all(r.passed for r in results[:2]) and results[2].outcome.error == NOT_STARTED
    assert {r.model for r in fake_openai.requests} == {GOOD}
    spent = sum(r.outcome.cost_micros for r in results)
    assert 0 < spent <= 10_300
    report = as_json(results, 3)
    assert report["not_started"] == 1 and report["models"][0]["runs"] == 2
    assert "1 runs did not start: the --max-usd cap was reached" in markdown(results, 3)


def test_python_m_bot_eval_writes_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The operator's command, on the fake endpoint: a progress bar, then the Markdown, JSON and (with matplotlib)
    PNG reports."""
    monkeypatch.setenv("REDIS_URL", TEST_REDIS_URL)
    report = tmp_path / "quality.md"
    assert bot_main(["eval", "--cases", "arithmetic/tip-*", "--k", "2", "--report", str(report)]) == 0
    err = capsys.readouterr().err
    assert "4/4 turns" in err and f"wrote {report}" in err
    text = report.read_text()
    assert "1 cases, k=2, against the fake endpoint (scripted models); 4 runs" in text
    assert f"| `{GOOD}` | 1 | 2 | 100.0% | 100.0% |" in text and f"| `{BAD}` | 1 | 2 | 0.0% | 0.0% |" in text
    assert json.loads(report.with_suffix(".json").read_text())["k"] == 2
    assert report.with_suffix(".png").exists() == (importlib.util.find_spec("matplotlib") is not None)
