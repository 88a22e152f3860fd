"""The harness's pure parts: the pass^k estimator, scores per model and category, the spend cap, case files that
cannot be read, the scripted models' replay, and ``python -m bot eval``'s refusals before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.__main__ import main as bot_main
from evalkit.cases import CaseError, load_cases
from evalkit.harness import Result, Spend
from evalkit.judges import Outcome
from evalkit.report import markdown
from evalkit.score import model_scores, pass_hat_k, percentile
from evalkit.scripted import GOOD, ScriptedModels
from evalkit.world import RunSpec
from tests.fakes.openai_server import RecordedRequest, TextReply, ToolCallsReply

ROOT = Path(__file__).resolve().parents[2]
CASE = """
- id: {id}
  category: arithmetic
  title: A sum
  turns: [{{say: "{say}"}}]
  judge: [{{answer_contains: ["4"]}}]
  good: [[{{call: {{calculator: {{expression: "2+2"}}}}}}, {{answer: "It is 4."}}]]
  bad: [[{{answer: "It is 5."}}]]
"""


@pytest.mark.parametrize(("c", "n", "k", "expected"), [
    (4, 4, 4, 1.0), (3, 4, 1, 0.75), (3, 4, 2, 0.5), (3, 4, 4, 0.0), (1, 4, 2, 0.0), (2, 2, 3, 0.0),
])
def test_pass_hat_k_is_the_chance_that_k_tries_drawn_from_n_all_succeed(c: int, n: int, k: int,
                                                                         expected: float) -> None:
    assert pass_hat_k(c, n, k) == pytest.approx(expected)


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0


def _result(tmp_path: Path, case_id: str, passed: bool, cost: int, category: str = "arithmetic") -> Result:
    (tmp_path / f"{case_id}.yaml").write_text(CASE.format(id=case_id, say=f"what is 2+2 for {case_id}"))
    case = load_cases(tmp_path, case_id)[0].model_copy(update={"category": category})
    return Result(RunSpec(case, "m", 0), Outcome(cost_micros=cost, steps=2, seconds=1.0),
                  None if passed else "the answer lacks ['4']")


def test_scores_average_pass_hat_k_over_tasks_and_price_each_success(tmp_path: Path) -> None:
    # Task a: 4 of 4 tries pass; task b: 2 of 4. pass^1 = (1 + 0.5) / 2; pass^2 = (1 + 1/6) / 2.
    results = [_result(tmp_path, "case-a", True, 1000) for _ in range(4)]
    results += [_result(tmp_path, "case-b", i < 2, 1000, "page") for i in range(4)]
    [score] = model_scores(results, 2)
    assert score.pass_1 == pytest.approx(0.75) and score.pass_k == pytest.approx((1 + 1 / 6) / 2)
    assert score.cost_per_task == pytest.approx(0.001) and score.cost_per_success == pytest.approx(0.008 / 6)
    assert score.categories == {"arithmetic": 1.0, "page": 0.5}
    report = markdown(results, 2)
    assert "| `m` | 2 | 8 | 75.0% | 58.3% |" in report
    assert "### `case-b` · `m` · try 1" in report and "**Judge:** the answer lacks ['4']" in report


def test_the_spend_cap_lets_a_run_start_only_while_its_worst_case_fits() -> None:
    spend = Spend(cap_micros=1_000, per_run_micros=600)
    assert spend.hold()
    assert not spend.hold()  # 600 held + 600 more > 1000
    spend.settle(100)
    assert spend.hold() and spend.held == 600 and spend.spent == 100
    assert Spend(None, 10**9).hold()  # no cap: the fake endpoint


@pytest.mark.parametrize(("text", "says"), [
    ("- id: Bad_Id\n  category: arithmetic", "id: String should match pattern"),
    (CASE.format(id="a-case", say="x").replace("bad: [[", "bad: [[{answer: extra}], ["), "`bad` has 2 turn(s)"),
    (CASE.format(id="a-case", say="x").replace('{answer: "It is 5."}', '{answr: "It is 5."}'), "ends with an `answer`"),
    (CASE.format(id="a-case", say="x") + "  colour: blue\n", "colour: Extra inputs are not permitted"),
    (CASE.format(id="a-case", say="x") + CASE.format(id="a-case", say="y"), "case id 'a-case' is used twice"),
    (CASE.format(id="a-case", say="x") + CASE.format(id="b-case", say="x"), "both say 'x'"),
    ("- [unclosed", "not YAML"),
])
def test_a_case_file_that_cannot_be_read_is_named_with_what_to_change(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "cases.yaml").write_text(text)
    with pytest.raises(CaseError) as raised:
        load_cases(tmp_path)
    assert says in str(raised.value)
    assert "both say" in says or "cases.yaml" in str(raised.value)


def test_the_golden_set_has_forty_cases_and_several_of_each_category() -> None:
    cases = load_cases(ROOT / "evals")
    assert len(cases) >= 40 and len([c for c in cases if c.injection is None]) >= 40
    categories = {c.category for c in cases}
    assert all(sum(c.category == name for c in cases) >= 3 for name in categories)
    assert {c.injection.vector for c in cases if c.injection} == {"page", "file", "search", "mcp", "message"}


def _request(model: str, *messages: dict[str, object]) -> RecordedRequest:
    return RecordedRequest("POST", "/v1/chat/completions", {}, {"model": model, "messages": list(messages)})


def test_the_scripted_model_finds_the_case_by_the_words_and_the_step_by_its_own_replies(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CASE.format(id="a-case", say="what is 2+2 today"))
    models = ScriptedModels(load_cases(tmp_path), lambda case, value: value)
    system = {"role": "system", "content": "You are careful."}
    asked = {"role": "user", "content": "what is 2+2 today"}
    first = models(_request(GOOD, system, asked, {"role": "system", "content": "progress: step 1"}))
    assert isinstance(first, ToolCallsReply) and first.calls[0].name == "calculator"
    called = {"role": "assistant", "tool_calls": [{"id": "c1"}]}
    second = models(_request(GOOD, system, asked, called, {"role": "tool", "content": "4"}))
    assert isinstance(second, TextReply) and second.content == "It is 4."
    bad = models(_request("scripted-bad", system, asked))
    assert isinstance(bad, TextReply) and bad.content == "It is 5."


def test_eval_on_a_real_endpoint_needs_a_spend_cap(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert bot_main(["eval", "--models", "gpt-4o-mini"]) == 2
    assert "--max-usd is required with a real endpoint" in capsys.readouterr().err
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert bot_main(["eval", "--cases", "no-such-case*"]) == 2
    assert "no case under" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        bot_main(["eval", "--max-usd", "-1"])
    assert done.value.code == 2 and "must be more than 0" in capsys.readouterr().err


def test_a_priced_model_entry_runs_under_its_name() -> None:
    from evalkit.runner import Endpoint

    entries = ["llama3:8b:0.10/0.20", "gpt-4o", "my-model:1/2/0.5"]
    assert Endpoint("http://127.0.0.1:9/v1", "k", entries).names == ["llama3:8b", "gpt-4o", "my-model"]


def test_the_endpoint_is_the_deployments_when_one_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.cli import configured

    assert configured(scripted=False).base_url is None  # nothing configured: the scripted models
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live")
    monkeypatch.setenv("OPENAI_MODEL", "my-model")
    live = configured(scripted=False)
    assert live.base_url and live.api_key == "sk-live" and live.models == ["my-model"]
    assert configured(scripted=True).base_url is None
