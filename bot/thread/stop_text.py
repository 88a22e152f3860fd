"""What stopped a run, in the asker's language: the engine's stop facts (``Stopped.facts``) worded here.

The engine's ``detail`` is English for logs and is never parsed back; the model's own words (a refusal, the
start of a cut-off answer) and what the run found are shown as they are.
"""

from __future__ import annotations

from collections.abc import Callable

from agent_core import StopFacts, Stopped, StopReason, format_usd
from bot.i18n import N_, _, ngettext

#: The cancel record of Slack's own stop button (an agent session's); a Stop press records ``pressed_by(user)``.
SLACK_STOP_BUTTON = "slack_stop_button"
_PRESSED = "user:"
STOPPED_BY = N_("stopped by {user}")
STOPPED_IN_SLACK = N_("stopped with Slack's stop button")

#: Why an LLM call failed (``agent_core.errors.LLMCause``), in words.
CAUSE_WORDS: dict[str, str] = {
    "unreachable": N_("the model endpoint could not be reached"),
    "timeout": N_("the model endpoint did not answer in time"),
    "rate_limited": N_("the model endpoint is rate limiting this app"),
    "quota": N_("the model provider's quota is used up"),
    "auth": N_("the model endpoint refused the app's credentials"),
    "bad_request": N_("the model endpoint refused the request"),
    "server_error": N_("the model endpoint failed"),
    "bad_response": N_("the model endpoint's answer could not be used"),
}
#: The budgets a run is held against (``bot.workspace.config`` layer names), in words.
BUDGET_WORDS: dict[str, str] = {"workspace": N_("workspace"), "org": N_("org"), "per-person": N_("per-person")}
#: A reason's words in the graceful answer: "I could not finish: <words> (<detail>)."
_HUMAN: dict[StopReason, str] = {
    StopReason.MAX_STEPS: N_("I reached the step limit"),
    StopReason.MAX_TOKENS: N_("I reached the token limit"),
    StopReason.MAX_COST: N_("I reached this run's cost limit"),
    StopReason.NO_PROGRESS: N_("my last steps brought nothing new"),
    StopReason.DANGEROUS_LOOP: N_("I was repeating the same action"),
    StopReason.BUDGET_EXHAUSTED: N_("the workspace's budget is used up"),
    StopReason.BUDGET_BUSY: N_("the workspace's budget is busy: other runs in progress hold the rest of it for now"),
    StopReason.CANCELLED: N_("the run was stopped"),
    StopReason.ERROR: N_("an error stopped the run"),
    StopReason.MAX_TIME: N_("I ran out of time"),
    StopReason.REFUSED: N_("the model declined to answer"),
    StopReason.CUT_OFF: N_("the answer was cut off at its length limit"),
}


def pressed_by(user: str) -> str:
    """The cancel record of a Stop press by Slack user ``user``."""
    return _PRESSED + user


def detail(event: Stopped) -> str:
    """``<reason>: <what stopped it>`` (the limit and the value observed, who stopped it, why it failed); empty
    for an answered run, or an end whose facts were not kept (one recovered after a restart)."""
    words = _WORDERS.get(event.reason, _nothing)(event.facts)
    if event.store_failed and event.facts.case not in ("store", "load"):
        words = "; ".join(filter(None, (words, _("the conversation could not be saved"))))
    return f"{event.reason.value}: {words}" if words else ""


def answer(event: Stopped) -> str:
    """The answer to show: the model's, or the engine's account of the stop worded here."""
    facts = event.facts
    if facts.engine_answer:
        return graceful(event.reason, detail(event), facts)
    match facts.case:
        case "message_too_long":
            return _("Your message is too long for this run's token limit: it is about {tokens} tokens ({chars} "
                     "characters), and with my instructions and tools a first call needs {need} tokens of the {cap} "
                     "a run may use. Shorten it by about {over} tokens (roughly {cut} characters) and send it again, "
                     "or ask an admin to raise the run's token limit. No LLM call was made.").format(
                tokens=_n(facts.used), chars=_n(facts.count), need=_n(facts.needed), cap=_n(facts.limit),
                over=_n(facts.needed - facts.limit), cut=_n(facts.shorten_chars))
        case "cap_too_small":
            return _("This run's token limit ({cap} tokens) is too small for any call: my instructions and tools "
                     "alone need about {need}. Ask an admin to raise it. No LLM call was made.").format(
                cap=_n(facts.limit), need=_n(facts.needed))
        case "declined_silently":
            return _("The model declined to answer this request and gave no reason. Rephrasing the request may "
                     "help.")
        case "content_filter":
            return _("The model provider's content filter stopped this reply, so I have no answer to show. "
                     "Rephrasing the request may help.")
        case "no_answer":
            return (_("The model used this call's whole completion cap ({cap} tokens) on reasoning and wrote no "
                      "answer.") if facts.count else
                    _("The model used this call's whole completion cap ({cap} tokens) and wrote no answer.")).format(
                cap=_n(facts.limit)) + " " + _("Ask a narrower question, or ask an admin to raise "
                                               "AGENT_MAX_COMPLETION_TOKENS.")
        case "cut_again" | "no_larger_call":
            return _("{answer}\n\n[cut off: the answer reached its completion cap of {cap} tokens; {why}]").format(
                answer=facts.text, cap=_n(facts.limit), why=_cut_why(facts))
        case "load":
            return _("I could not load this conversation.")
    return event.answer


def graceful(reason: StopReason, said: str, facts: StopFacts) -> str:
    """The answer of a run a limit ended: what was found and what is missing (the engine's, in words)."""
    why = _(_HUMAN[reason]) if reason in _HUMAN else reason.value
    lines = [_("I could not finish: {why} ({detail}).").format(why=why, detail=said or reason.value)]
    if facts.findings:
        lines.append(_("What I found so far:"))
        lines.extend(f"• {found}" for found in facts.findings)
    else:
        lines.append(_("I had not found anything useful yet."))
    task = " ".join(facts.task.split())
    lines.append(_("Still missing: a complete answer to “{task}”.").format(
        task=task if len(task) <= 200 else task[:199] + "…"))
    if reason is StopReason.BUDGET_EXHAUSTED:
        lines.append(_("Once an admin raises the budget, reply in this thread and I will continue where I stopped."))
    elif reason is StopReason.BUDGET_BUSY:
        lines.append(_("The budget is not used up: reply in this thread in a minute, once those runs have finished, "
                       "and I will continue where I stopped."))
    elif reason not in (StopReason.ERROR, StopReason.CANCELLED):
        lines.append(_("Reply in this thread to let me continue from here."))
    return "\n".join(lines)


def _n(value: float) -> str:
    return f"{int(value):,}"


def _usd(micros: float) -> str:
    return format_usd(int(micros))


def _nothing(facts: StopFacts) -> str:
    return ""


def _cut_why(facts: StopFacts) -> str:
    return (_("it was cut off again after one retry with a larger cap") if facts.case == "cut_again"
            else _("a larger call does not fit this run's limits"))


def _max_tokens(facts: StopFacts) -> str:
    if facts.case == "message_too_long":
        return _("{cap} cap; the message is {tokens} tokens ({chars} characters) and a first call needs {need}: "
                 "{over} tokens over").format(cap=_n(facts.limit), tokens=_n(facts.used), chars=_n(facts.count),
                                              need=_n(facts.needed), over=_n(facts.needed - facts.limit))
    if facts.case == "cap_too_small":
        return _("{cap} cap is below the {need} tokens every call needs before the message (instructions, tools, "
                 "an answer)").format(cap=_n(facts.limit), need=_n(facts.needed))
    return _("{cap} cap, {used} used, the next call needs {need}").format(
        cap=_n(facts.limit), used=_n(facts.used), need=_n(facts.needed))


def _budget(facts: StopFacts) -> str:
    return _(BUDGET_WORDS[facts.budget]) if facts.budget in BUDGET_WORDS else facts.budget


def _budget_busy(facts: StopFacts) -> str:
    limit = _usd(facts.limit) if facts.limit >= 0 else _("no")
    return ngettext(
        "{n} run in flight holds {held} of the {limit} {budget} budget ({spent} spent); waited {seconds}s for it "
        "to finish",
        "{n} runs in flight hold {held} of the {limit} {budget} budget ({spent} spent); waited {seconds}s for them "
        "to finish", facts.count).format(n=facts.count, held=_usd(facts.left), limit=limit, budget=_budget(facts),
                                         spent=_usd(facts.used), seconds=f"{facts.seconds:.1f}")


def _loop(facts: StopFacts) -> str:
    if facts.case == "cycle":
        return _("the same {n} calls repeated in a cycle; {tool} was not run again").format(n=facts.count,
                                                                                            tool=facts.tool)
    return _("{tool} proposed with the same arguments {n} times in a row; the last was not run").format(
        tool=facts.tool, n=facts.count)


def _cancelled(facts: StopFacts) -> str:
    if facts.cancelled_by == SLACK_STOP_BUTTON:
        return _(STOPPED_IN_SLACK)
    if facts.cancelled_by.startswith(_PRESSED):
        return _(STOPPED_BY).format(user=f"<@{facts.cancelled_by.removeprefix(_PRESSED)}>")
    return _("stopped on request")


def _error(facts: StopFacts) -> str:
    if facts.case == "llm":
        words = _(CAUSE_WORDS[facts.cause]) if facts.cause in CAUSE_WORDS else ""
        said = f"{words} ({facts.cause})" if words else facts.cause
    elif facts.case == "load":
        said = _("this conversation could not be loaded")
    else:
        said = _("the state store failed") if facts.case == "store" else ""
    # The error's own message (the provider's wording) as it is, after the words for its cause.
    return f"{said}: {facts.message}" if said and facts.message else said


def _refused(facts: StopFacts) -> str:
    if facts.case == "content_filter":
        return _("the provider's content filter stopped the reply")
    return _("the model declined to answer") if facts.case in ("declined", "declined_silently") else ""


def _cut_off(facts: StopFacts) -> str:
    if facts.case == "no_answer":
        return (_("the model spent its whole {cap}-token completion cap on reasoning and wrote no answer")
                if facts.count else _("the model spent its whole {cap}-token completion cap and wrote no answer")
                ).format(cap=_n(facts.limit))
    return _("the answer reached its {cap}-token completion cap; {why}").format(cap=_n(facts.limit),
                                                                                why=_cut_why(facts))


_WORDERS: dict[StopReason, Callable[[StopFacts], str]] = {
    StopReason.MAX_STEPS: lambda f: _("{cap} steps cap reached").format(cap=_n(f.limit)) if f.limit else "",
    StopReason.MAX_TOKENS: lambda f: _max_tokens(f) if f.limit else "",
    StopReason.MAX_COST: lambda f: _("{cap} cap, {spent} spent, next call could cost {cost}").format(
        cap=_usd(f.limit), spent=_usd(f.used), cost=_usd(f.needed)) if f.limit else "",
    StopReason.BUDGET_EXHAUSTED: lambda f: _("the {budget} budget has {left} left, the next call could cost {cost}")
    .format(budget=_budget(f), left=_usd(f.left), cost=_usd(f.needed)) if f.budget else "",
    StopReason.BUDGET_BUSY: lambda f: _budget_busy(f) if f.budget else "",
    StopReason.NO_PROGRESS: lambda f: ngettext("{n} step in a row brought nothing new",
                                               "{n} steps in a row brought nothing new", f.count).format(n=f.count)
    if f.count else "",
    StopReason.DANGEROUS_LOOP: lambda f: _loop(f) if f.tool else "",
    StopReason.CANCELLED: lambda f: _cancelled(f) if f.cancelled_by or f.case else "",
    StopReason.ERROR: _error,
    StopReason.MAX_TIME: lambda f: _("{cap}s cap, {elapsed}s elapsed").format(
        cap=f"{f.limit:g}", elapsed=f"{f.used:.1f}") if f.limit else "",
    StopReason.REFUSED: _refused,
    StopReason.CUT_OFF: lambda f: _cut_off(f) if f.limit else "",
}
