"""The exfiltration guard: once a run has read private data, data goes only where the requester or an admin
said it may go.

Three things make a leak: private data, untrusted instructions (a channel message, a page), and an
outbound channel. The guard watches the first and holds back the third, deciding by destination: a hijacked
model can reshape the data at will (reversed, encoded, split, paraphrased), but not where it sends it.
It arms when a tool marked ``reads_private_data`` returns (``channel_history``, flagged MCP tools), when a
tool's ``private_result`` says so (fetch_url: a page from a ``FETCH_URL_ALLOWED_HOSTS`` host, internal means
private), when the caller passes thread text by others (``EgressPolicy.private_texts``) or files (``given``),
or when the conversation it resumes holds such output. Armed, each call of a tool marked ``outbound`` is checked first:

1. a destination on the deny-list: held back, whatever else would allow it;
2. any argument carrying private text (``tools.leaks``, the second layer): held back, even where allowed;
3. a tool sending to one fixed service (``Tool.sends_to``: web_search's provider, an external MCP server; any
   outbound tool without URL arguments) needs the requester's approval, unless the requester already approved
   that service for this run or (``requester_words_pass``: web_search) every word sent is the requester's own;
4. a URL destination (``Tool.destination_args``) must be a URL from the requester's own messages, on an
   allow-listed host, or approved (that URL once, or its host for the run);
5. otherwise: held back with the reason (mode ``on``), or put to the requester (mode ``approve``).

Then the integrity rule (``tools.integrity``): once the run has read untrusted content, a ``consequential`` call
whose target or payload that content chose is put to the requester (in modes ``on`` and ``approve``).

One guard per ``Executor``, and the engine builds one executor per run, so the state is the run's. The URLs it
finds are ``tools.outbound_urls``'s, and the observation of a held-back call is ``tools.hold_notice``'s.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any

from tools.answer_links import neutralise
from tools.context import EgressApprover, Parked, ToolContext
from tools.destinations import (
    Ask,
    payload,
    private_source,
    private_text,
    requester_words_only,
    service_of,
    service_rule,
)
from tools.egress import (
    DEFAULT_GUARD_MODE,
    EgressAnswer,
    EgressHeld,
    EgressPolicy,
    EgressRequest,
    GuardMode,
    HeldBack,
    HoldReason,
)
from tools.hold_notice import explain
from tools.integrity import Provenance, Steer
from tools.leak_split import SplitWatch
from tools.leaks import Leak, LeakIndex
from tools.outbound_urls import all_urls, destination, listed, normal, strings, urls_in
from tools.registry import Registry
from tools.result import ToolResult
from tools.tool import Tool

log = logging.getLogger(__name__)

#: The source named for thread text by others (``EgressPolicy.private_texts``).
THREAD_SOURCE = "thread messages from others"
_WRAPPED = re.compile(r'<<<tool_output name="([A-Za-z0-9_.-]+)">>>\n(.*?)\n<<<end_tool_output>>>', re.DOTALL)


class ExfiltrationGuard:
    """One run's guard state: the private data read so far, and the URLs the requester approved."""

    def __init__(self, mode: GuardMode | str = DEFAULT_GUARD_MODE) -> None:
        self.mode = GuardMode(mode)
        self._sources: dict[str, None] = {}  # ordered set of what armed it
        self._private: list[str] = []
        self._approved: set[str] = set()  # URLs approved once
        self._approved_scopes: set[str] = set()  # destinations approved for the run (_Ask.scope)
        self._index_key: tuple[Any, ...] | None = None
        self._index = LeakIndex(())
        self._split = SplitWatch(urls_in)  # pieces of private text spread over this run's calls
        self._seen = Provenance()  # untrusted content read so far: the integrity rule's (``tools.integrity``)

    def armed(self, policy: EgressPolicy) -> bool:
        """True once the run has read private data (or was given some)."""
        return self.mode is not GuardMode.OFF and bool(self._private or policy.private_texts)

    def sources(self, policy: EgressPolicy) -> tuple[str, ...]:
        return (*self._sources, *((THREAD_SOURCE,) if policy.private_texts else ()))

    def observe(self, tool: Tool, result: ToolResult) -> None:
        """Remember what a private tool returned (called after every call)."""
        if result.ok and result.full.strip() and (source := private_source(tool, result.full)):
            self._add(source, private_text(tool, result.full))
        self._seen.observe(tool, result.ok, result.full)

    def remember_transcript(self, texts: Iterable[object], registry: Registry) -> None:
        """Arm from a conversation loaded from the store: earlier runs' (or a crashed run's) tool outputs.

        Outputs are found by their ``wrap_untrusted`` delimiters, which tool text cannot fake. An MCP tool
        (``<server>__<tool>``) this run does not have counts as private: its flags are unknown, fail closed.
        Another unknown name is a tool the model made up: its output was an "unknown tool" message.
        """
        for text in texts:
            if not isinstance(text, str) or "<<<tool_output" not in text:
                continue
            for name, body in _WRAPPED.findall(text):
                tool = registry.get(name)
                source = (name if "__" in name else None) if tool is None else private_source(tool, body)
                if source and body.strip():
                    self._add(source, body if tool is None else private_text(tool, body))
                if tool is None or tool.untrusted_output:
                    self._seen.add(name, body)

    def given(self, source: str, text: str = "") -> None:
        """Arm with private data the caller gave the run itself (a file attached to it): ``text`` is what of it
        the model sees as text, for the leak check ("" for an image, or a file read later through a tool)."""
        self._add(source, text)
        self._seen.add(source, text)

    async def clear(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> HeldBack | None:
        """None when ``tool`` may run with ``arguments``; else what was held back (the sink is told)."""
        policy = ctx.egress
        secrecy = tool.outbound and self.armed(policy)
        integrity = tool.consequential and self.mode is not GuardMode.OFF and self._seen.read(ctx)
        if not (secrecy or integrity):
            return None
        # Off the event loop: decoding a long argument, or indexing a long channel read, takes milliseconds,
        # and the call it guards goes over the network anyway.
        try:
            held, asks = await asyncio.to_thread(self._review_both, tool, arguments, ctx, secrecy, integrity)
        except Exception as exc:  # fail closed: a call the guard cannot judge does not run
            log.exception("exfiltration guard could not check %s", tool.name)
            detail = f"Held back: {tool.name} did not run: the exfiltration guard could not check it ({exc!r:.80})."
            held, asks = HeldBack(tool.name, HoldReason.NOT_ALLOWED, "", "", detail, self.sources(policy),
                                  ctx.run_id, ctx.step), []
        for ask in asks if held is None else ():
            answer = await self._ask(tool, arguments, ask, ctx)
            if answer is EgressAnswer.RUN:
                self._approved_scopes.add(ask.scope)
            elif answer is EgressAnswer.ONCE:
                if ask.url:
                    self._approved.add(ask.url)
            elif ask.steer is not None:
                held = self._held(tool, HoldReason.STEERED, "", ctx, steer=ask.steer)
                break
            else:
                service = "" if ask.url else ask.destination
                held = self._held(tool, HoldReason.NOT_APPROVED, ask.url, ctx, service=service)
                break
        if held is not None:
            await self.notify(held, ctx)
        return held

    def hop_check(self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext) -> Callable[[str], None] | None:
        """For a cleared call, a check of each redirect hop (raises ``EgressHeld``); None when unarmed."""
        if not tool.outbound or not self.armed(ctx.egress):
            return None
        hosts = {dest[1] for u in self._destinations(tool, arguments) if (dest := destination(u)) is not None}

        def check(raw: str) -> None:
            dest = destination(raw)
            if dest is not None and not listed(dest[1], ctx.egress.denied_domains) and (
                dest[1] in hosts or self._allowed(*dest, ctx)
            ):
                return
            raise EgressHeld(self._held(tool, HoldReason.REDIRECT, raw, ctx))

        return check

    def answer(self, text: str, ctx: ToolContext) -> str:
        """``text`` as the run may show it: armed, a link to a destination the run may not reach (``_allowed``)
        is shown as text (``tools.answer_links``), so no click, unfurl or image load carries data out."""
        if not self.armed(ctx.egress):
            return text

        return neutralise(text, partial(self._reachable, ctx=ctx))

    async def notify(self, held: HeldBack, ctx: ToolContext) -> None:
        """Log (host only: a URL may carry the data) and tell the caller's sink; a broken sink is logged."""
        log.info("exfiltration guard held back %s to %r in run %s: %s", held.tool, held.host, held.run_id,
                 held.reason.value)
        if ctx.egress.notices is None:
            return
        try:
            await ctx.egress.notices.held_back(held)
        except Exception:  # the call stays held back; a failed notice must not turn into a tool error
            log.exception("held-back notice failed for run %s", held.run_id)

    # -- the review -----------------------------------------------------------------------------------
    def _review_both(
        self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext, secrecy: bool, integrity: bool
    ) -> tuple[HeldBack | None, list[Ask]]:
        """Secrecy first (where private data goes), then integrity (who chose the action): a steered call is put
        to the requester in modes ``on`` and ``approve`` alike, since only they know what they meant."""
        held, asks = self._review(tool, arguments, ctx) if secrecy else (None, [])
        if held is None and integrity:
            steer = self._seen.review(tool, arguments, ctx, partial(self._reachable, ctx=ctx))
            scope = steer and f"steer:{tool.name}:{steer.kind}:{steer.value}"
            if steer is not None and scope not in self._approved_scopes:
                asks.append(Ask("", steer.value, payload(arguments), str(scope), steer.why(), steer))
        return held, asks

    def _reachable(self, raw: str, ctx: ToolContext) -> bool:
        dest = destination(raw)
        return dest is not None and not listed(dest[1], ctx.egress.denied_domains) and self._allowed(*dest, ctx)

    def _review(
        self, tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> tuple[HeldBack | None, list[Ask]]:
        """(what holds the call back, or None with the destinations that need the requester's approval)."""
        policy = ctx.egress
        requester_urls = self._requester_urls(ctx)
        destinations = list(self._destinations(tool, arguments))
        # A tool naming no destination in this call (no URL argument found) still sends somewhere.
        service = service_of(tool, urls_found=bool(destinations))
        for raw in destinations:
            dest = destination(raw)
            if dest is not None and listed(dest[1], policy.denied_domains):
                return self._held(tool, HoldReason.DENIED_DOMAIN, raw, ctx), []
        leak = self._leak(tool, arguments, requester_urls, ctx)
        if leak is not None:
            where, found = leak
            return self._held(tool, HoldReason.LEAK, where, ctx, found), []
        if service:  # one fixed service receives the whole call: it is the destination (URLs in it are payload)
            scope = f"service:{service}"
            if scope in self._approved_scopes or (
                tool.requester_words_pass and requester_words_only(arguments, ctx)
            ):
                return None, []
            if self.mode is not GuardMode.APPROVE:
                return self._held(tool, HoldReason.NOT_ALLOWED, "", ctx, service=service), []
            return None, [Ask("", service, payload(arguments), scope, service_rule(tool, service))]
        asks = []
        for raw in destinations:
            dest = destination(raw)
            if dest is None or not self._allowed(*dest, ctx):
                if self.mode is not GuardMode.APPROVE or dest is None:
                    return self._held(tool, HoldReason.NOT_ALLOWED, raw, ctx), []
                asks.append(Ask(dest[0], dest[1], dest[0], f"host:{dest[1]}",
                                 f"{dest[1]} is not on the workspace allow-list"))
        return None, asks

    def _allowed(self, url: str, host: str, ctx: ToolContext) -> bool:
        return (
            url in self._requester_urls(ctx)
            or url in self._approved
            or f"host:{host}" in self._approved_scopes
            or listed(host, ctx.egress.allowed_domains)
        )

    def _destinations(self, tool: Tool, arguments: Mapping[str, Any]) -> Iterator[str]:
        if tool.destination_args is not None:
            for name in tool.destination_args:
                value = arguments.get(name)
                if isinstance(value, str) and value.strip():  # an address as such: ``mailto:``
                    yield next(iter(urls_in(value)), value) if "://" not in value else value.strip()
            return
        for text in strings(arguments):
            yield from urls_in(text)

    def _leak(
        self, tool: Tool, arguments: Mapping[str, Any], requester_urls: set[str], ctx: ToolContext
    ) -> tuple[str, Leak] | None:
        index = self._leak_index(ctx)
        # A URL the requester gave, or one that stands in the private text itself, is not a carrier: it goes
        # where it always pointed (the destination rule still applies to it).
        exempt = requester_urls | self._private_urls(ctx)

        def scrub(text: str) -> str:
            for url in urls_in(text):
                if normal(url) in exempt:  # as written: an address has no ``mailto:``, a bare URL no scheme
                    text = text.replace(url, " ").replace(url.removeprefix("mailto:").removeprefix("http://"), " ")
            return text

        for text in strings(arguments):
            found = index.find(scrub(text))
            if found is not None:
                return text, found
        return self._split.find(index, tool.name, arguments, scrub)

    def _leak_index(self, ctx: ToolContext) -> LeakIndex:
        policy = ctx.egress
        key = (len(self._private), policy.private_texts, policy.requester_texts, ctx.task)
        if key != self._index_key:
            self._index = LeakIndex([*self._private, *policy.private_texts],
                                    exempt=[*policy.requester_texts, ctx.task])
            self._index_key = key
        return self._index

    def _requester_urls(self, ctx: ToolContext) -> set[str]:
        return {normal(u) for text in (*ctx.egress.requester_texts, ctx.task) for u in all_urls(text)}

    def _private_urls(self, ctx: ToolContext) -> set[str]:
        return {normal(u) for text in (*self._private, *ctx.egress.private_texts) for u in all_urls(text)}

    def _add(self, source: str, text: str) -> None:
        self._sources[source] = None
        self._private.append(text)

    async def _ask(self, tool: Tool, arguments: Mapping[str, Any], ask: Ask, ctx: ToolContext) -> EgressAnswer:
        location, _, query = ask.url.partition("?")
        read = (f"untrusted content ({', '.join(self._seen.sources(ctx, THREAD_SOURCE))})" if ask.steer
                else f"private data ({', '.join(self.sources(ctx.egress))})")
        request = EgressRequest(
            tool=tool.name, url=ask.url, host=ask.destination if ask.url else "", location=location, query=query,
            arguments=dict(arguments), reason=f"This run has read {read}, and {ask.why}.",
            destination=ask.destination, payload=ask.payload, scope=ask.scope,
        )
        approver = ctx.approver
        try:
            if isinstance(approver, EgressApprover):
                answer = await approver.approve_egress(request, ctx)
            else:
                answer = await approver.approve(tool.name, arguments, ctx)
        except Parked:
            raise  # asked by a policy's approvers: the run is saved here and resumed once decided
        except Exception as exc:  # fail closed: no answer is a refusal
            log.warning("approver failed for %s: %s", tool.name, type(exc).__name__)
            return EgressAnswer.DENY
        if isinstance(answer, EgressAnswer):
            return answer
        return EgressAnswer.ONCE if answer is True else EgressAnswer.DENY

    def _held(
        self, tool: Tool, reason: HoldReason, url: str, ctx: ToolContext, leak: Leak | None = None, service: str = "",
        steer: Steer | None = None,
    ) -> HeldBack:
        if steer is not None:  # the target is shown: it came from the content, not from private data
            sources = self._seen.sources(ctx, THREAD_SOURCE)
            detail = explain(tool.name, reason, "", sources, self.mode, None, steer=steer)
            return HeldBack(tool.name, reason, "", "", detail, sources, ctx.run_id, ctx.step)
        sources = self.sources(ctx.egress)
        if leak is not None:  # the argument is the private data: it goes nowhere, not even into the notice
            return HeldBack(tool.name, reason, "", "", explain(tool.name, reason, "", sources, self.mode, leak),
                            sources, ctx.run_id, ctx.step)
        if service:
            detail = explain(tool.name, reason, "", sources, self.mode, None, service_rule(tool, service))
            return HeldBack(tool.name, reason, "", "", detail, sources, ctx.run_id, ctx.step, service)
        dest = destination(url)
        host = dest[1] if dest is not None else ""
        detail = explain(tool.name, reason, host or url[:80], sources, self.mode, None)
        return HeldBack(tool.name, reason, url, host, detail, sources, ctx.run_id, ctx.step)
