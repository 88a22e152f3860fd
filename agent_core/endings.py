"""Replies that are no step: a refusal, a content filter's stop, an answer cut off at its completion cap.

Each would otherwise read as an empty reply (asked again, up to ``no_progress``) or as a whole answer. A reply
is looked at here only when it carries a refusal or an unusual ``finish_reason`` (:data:`UNUSUAL`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from agent_core import text_react
from agent_core.completion import LLMResponse
from agent_core.context import Prompt
from agent_core.events import StopReason
from agent_core.run_state import Run
from agent_core.stopper import CallPlan, Stop

#: ``finish_reason`` values that may end a run here (``stop`` and ``tool_calls`` never do). ``refusal`` is
#: Anthropic's own, passed on by gateways (LiteLLM) with empty deltas and no ``message.refusal``.
UNUSUAL = frozenset({"length", "content_filter", "refusal"})

DECLINED_ANSWER = ("The model declined to answer this request and gave no reason. Rephrasing the request may "
                   "help.")
FILTERED_ANSWER = ("The model provider's content filter stopped this reply, so I have no answer to show. "
                   "Rephrasing the request may help.")


@dataclass(frozen=True, slots=True)
class CutOff:
    """An answer cut off at its completion cap: the run goes on once with a larger cap when its limits allow."""

    text: str


def outcome(run: Run, reply: LLMResponse, protocol: Literal["tools", "react"], redact: Callable[[str], str],
            context: Callable[[Run], Prompt]) -> LLMResponse | Stop | tuple[Prompt, CallPlan]:
    """``reply`` when it is a step. A refusal or a content filter's stop ends the run; an answer cut off at its
    cap is asked for once more with twice the cap (the prompt and plan returned) when the run's limits allow
    it, else ends the run marked as cut off. ``context`` assembles the run's next prompt."""
    if reply.refusal is None and reply.finish_reason not in UNUSUAL:
        return reply  # the common case: one attribute and one set look-up
    judged = judge(reply, protocol, run.call_cap, redact)
    if judged is None:
        return reply
    if isinstance(judged, Stop):
        return judged
    if run.cut_retried:
        return cut_off(judged, run.call_cap, "it was cut off again after one retry with a larger cap")
    run.cut_retried = True
    prompt = context(run)
    plan = run.stopper.plan_call(prompt.tokens + run.tools_tokens, None, completion_cap=2 * run.call_cap)
    if isinstance(plan, CallPlan) and plan.max_tokens > run.call_cap and not run.cancel.cancelled:
        return prompt, plan
    return cut_off(judged, run.call_cap, "a larger call does not fit this run's limits")


def text_stands(outcome: object) -> bool:
    """Whether a call's streamed text stands: it was a reply, or the start of an answer that stays cut off."""
    return isinstance(outcome, LLMResponse) or (isinstance(outcome, Stop) and outcome.reason is StopReason.CUT_OFF)


def judge(reply: LLMResponse, protocol: Literal["tools", "react"], cap: int,
          redact: Callable[[str], str]) -> Stop | CutOff | None:
    """What ``reply`` (made with completion cap ``cap``) means for the run; None: read it as a step."""
    if reply.refusal is not None:
        return Stop(StopReason.REFUSED, "refused: the model declined to answer (message.refusal)",
                    answer=redact(reply.refusal))
    if reply.finish_reason == "refusal" and not reply.tool_calls:
        # Whatever text came before the model stopped itself is not an answer it stands by.
        return Stop(StopReason.REFUSED, "refused: the model declined to answer (finish_reason refusal)",
                    answer=DECLINED_ANSWER)
    if reply.finish_reason == "content_filter":
        return Stop(StopReason.REFUSED, "refused: the provider's content filter stopped the reply "
                    "(finish_reason content_filter)", answer=FILTERED_ANSWER)
    if reply.finish_reason != "length" or reply.tool_calls:
        return None  # cut tool arguments are reported to the model as invalid, and the run goes on
    text = (reply.content or "").strip()
    if not text:
        spent = "on reasoning " if reply.reasoning else ""
        return Stop(
            StopReason.CUT_OFF,
            f"cut_off: the model spent its whole {cap:,}-token completion cap {spent}and wrote no answer "
            "(finish_reason length)",
            answer=(f"The model used this call's whole completion cap ({cap:,} tokens) {spent}and wrote no answer. "
                    "Ask a narrower question, or ask an admin to raise AGENT_MAX_COMPLETION_TOKENS."),
        )
    if protocol == "react":
        parsed = text_react.parse(text)
        if not isinstance(parsed, text_react.ReactFinal):
            return None  # a cut Action is a format error the model is told about
        text = parsed.answer
    return CutOff(redact(text))


def cut_off(answer: CutOff, cap: int, why: str) -> Stop:
    """The stop of an answer that stays cut off: the text so far, marked as such, with the reason."""
    return Stop(
        StopReason.CUT_OFF,
        f"cut_off: the answer reached its {cap:,}-token completion cap (finish_reason length); {why}",
        answer=f"{answer.text}\n\n[cut off: the answer reached its completion cap of {cap:,} tokens; {why}]",
    )
