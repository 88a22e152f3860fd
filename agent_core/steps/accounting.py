"""What an LLM call used, as the run records it: the endpoint's usage report, completed by offline counts."""

from __future__ import annotations

from dataclasses import replace

from agent_core.completion import LLMResponse
from agent_core.cost import Price
from agent_core.events import Usage
from agent_core.steps.run_state import Run
from agent_core.stopper import CallPlan
from agent_core.tokens import TokenCounter


def usage_of(reply: LLMResponse, plan: CallPlan, counter: TokenCounter, price: Price) -> Usage:
    """The endpoint's usage report; what it left out is counted offline, and the usage marked an estimate."""
    prompt = reply.prompt_tokens or plan.prompt_tokens
    # Our own count is an estimate: it never exceeds what the call asked for (the hold covers that);
    # only the provider's own usage may say more.
    completion = reply.completion_tokens or min(plan.max_tokens, counter.count(
        (reply.content or "") + (reply.reasoning or "") + (reply.refusal or "")
        + "".join(c.arguments for c in reply.tool_calls)
    ))
    cached = min(reply.cached_tokens, prompt)
    estimated = not reply.prompt_tokens or not reply.completion_tokens or reply.usage_estimated
    return Usage(prompt, completion, cached, price.cost_micros(prompt, completion, cached), estimated)


def worst_case(plan: CallPlan) -> Usage:
    """The usage of a call the endpoint may bill but did not report: the whole of what it was allowed."""
    return Usage(plan.prompt_tokens, plan.max_tokens, 0, plan.worst_case_micros, estimated=True)


def record(run: Run, usage: Usage) -> None:
    """Count ``usage`` against the run's caps and in its progress."""
    run.stopper.record_call(usage)
    total = run.stopper.usage
    run.progress = replace(run.progress, step=run.stopper.steps, prompt_tokens=total.prompt_tokens,
                           completion_tokens=total.completion_tokens, cost_micros=total.cost_micros,
                           usage_estimated=total.estimated)
