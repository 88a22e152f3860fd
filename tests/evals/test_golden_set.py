"""Every golden case through the real pipeline (signed events, the service's worker, the fake Slack serving the
case's data, real Redis, the canned MCP server) against two scripted models on the fake endpoint: the one that
replays the case's recorded good trajectory must pass its judge, the one that replays the bad one must fail it.
One evaluation serves every case (the service and the fakes start once per phase)."""

from __future__ import annotations

from pathlib import Path

from evalkit.cases import load_cases
from evalkit.harness import Result
from evalkit.report import as_json, markdown
from evalkit.runner import Endpoint, Options, evaluate
from evalkit.scripted import BAD, GOOD
from tests.conftest import TEST_REDIS_URL

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
