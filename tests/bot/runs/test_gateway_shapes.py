"""A model behind a gateway (LiteLLM's proxy), through the service: an account out of quota ends the run at once
with the reason, whatever error shape the gateway gives it, while a true rate limit is waited out; a refusal the
gateway streams as empty deltas with ``finish_reason: refusal`` is a refusal, not three empty replies."""

from __future__ import annotations

import pytest

from tests.bot.runs.test_llm_faults import BOUND_SECONDS, run_once
from tests.fakes.openai_server import FakeOpenAI, Reply, error, refusal, streamed, text
from tests.fakes.slack_api import FakeSlack

#: LiteLLM's proxy turns every provider 429 into this shape, the provider's words in the message.
LITELLM_QUOTA = error(
    429, "litellm.RateLimitError: RateLimitError: OpenAIException - You exceeded your current quota, please check "
    "your plan and billing details.", type="throttling_error", code="429")
#: LiteLLM's own budget for the key, spent.
LITELLM_BUDGET = error(400, "Budget has been exceeded! Current cost: 10.2, Max budget: 10.0",
                       type="budget_exceeded", code="400")
#: An Anthropic account without credit, behind LiteLLM.
ANTHROPIC_CREDIT = error(
    400, 'litellm.BadRequestError: AnthropicException - {"type":"error","error":{"type":"invalid_request_error",'
    '"message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade '
    'or purchase credits."}}', type=None, code="400")
#: A gateway's 402 Payment Required.
PAYMENT_REQUIRED = error(402, "Insufficient credits", type="payment_required")

QUOTAS: dict[str, Reply] = {"litellm throttling_error quota": LITELLM_QUOTA, "litellm budget_exceeded": LITELLM_BUDGET,
                            "anthropic credit via litellm": ANTHROPIC_CREDIT, "402": PAYMENT_REQUIRED}


@pytest.mark.parametrize("shape", list(QUOTAS))
async def test_an_account_out_of_quota_behind_a_gateway_ends_the_run_at_once_with_the_reason(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, shape: str
) -> None:
    # Before: LiteLLM's throttling_error was retried as a rate limit (12 times over 25 s in the field).
    fake_openai.queue(*[QUOTAS[shape]] * 4, text("never reached"))
    thread, records, took, finals = await run_once(key_prefix, fake_slack, fake_openai, openai_max_retries=3)
    assert len(fake_openai.requests) == 1  # asked once: waiting never refills an account
    assert took < BOUND_SECONDS
    assert len(finals) == 1 and "quota, credit or budget is used up" in finals[0], thread
    assert "add credit or raise the limit" in finals[0]
    assert [r.stop_reason for r in records] == ["error"]


async def test_a_quota_error_a_gateway_streams_after_its_200_is_not_retried(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    # LiteLLM reports a provider's failure after the stream began as an event {"error": {...}}.
    mid_stream = streamed(text("Let me"), cut_after=1, error=LITELLM_QUOTA)
    fake_openai.queue(*[mid_stream] * 4, text("never reached"))
    thread, records, _, finals = await run_once(key_prefix, fake_slack, fake_openai, openai_max_retries=3,
                                                agent_display="timeline")  # a display that streams the answer
    assert fake_openai.requests[0].stream
    assert len(fake_openai.requests) == 1
    assert len(finals) == 1 and "quota, credit or budget is used up" in finals[0], thread
    assert [r.stop_reason for r in records] == ["error"]


async def test_a_true_rate_limit_behind_litellm_is_still_waited_out(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    limited = error(429, "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for gpt-4o-mini "
                    "in organization org-abc on requests per min (RPM): Limit 3, Used 3.", type="throttling_error",
                    code="429", headers={"Retry-After": "0"})
    fake_openai.queue(limited, limited, text("It is 42."))
    _, records, _, finals = await run_once(key_prefix, fake_slack, fake_openai, openai_max_retries=3)
    assert len(fake_openai.requests) == 3 and "It is 42." in finals[0]
    assert [r.stop_reason for r in records] == ["final_answer"]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "json"])
async def test_an_empty_reply_with_a_refusal_finish_is_a_refusal_after_one_call(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, stream: bool
) -> None:
    # Before: read as an empty reply, asked again twice, and ended as no_progress.
    fake_openai.queue(*[streamed(text("", finish_reason="refusal"))] * 3)
    thread, records, _, finals = await run_once(key_prefix, fake_slack, fake_openai, openai_stream=stream)
    assert len(fake_openai.requests) == 1
    assert len(finals) == 1 and "The model declined to answer" in finals[0], thread
    assert "Stop reason: `refused` (the model declined)" in finals[0]
    assert [r.stop_reason for r in records] == ["refused"]


async def test_a_streamed_delta_refusal_behind_a_gateway_is_shown_verbatim(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    words = "I can't help with that."
    fake_openai.queue(streamed(refusal(words), pieces=3), text("never reached"))
    _, records, _, finals = await run_once(key_prefix, fake_slack, fake_openai, openai_stream=True)
    assert len(fake_openai.requests) == 1 and words in finals[0]
    assert [r.stop_reason for r in records] == ["refused"]
