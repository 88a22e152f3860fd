"""Markdown → mrkdwn conversion, neutralising, shortening and splitting (pure functions)."""

from __future__ import annotations

import pytest

from bot.thread.mrkdwn import SECTION_LIMIT, WORD_JOINER, code_block, escape, shorten, split, to_mrkdwn


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**bold** and __bold__", "*bold* and *bold*"),
        ("*italic* text", "_italic_ text"),
        ("~~gone~~", "~gone~"),
        ("# Title", "*Title*"),
        ("- one\n* two", "• one\n• two"),
        ("[docs](https://x.example/a?b=1&c=2)", "<https://x.example/a?b=1&amp;c=2|docs>"),
        ("`a < b`", "`a &lt; b`"),
        ("```python\nif a < b: **no**\n```", "```\nif a &lt; b: **no**\n```"),
        ("2 * 3 * 4", "2 * 3 * 4"),
    ],
)
def test_conversion(markdown: str, expected: str) -> None:
    assert to_mrkdwn(markdown) == expected


@pytest.mark.parametrize("ping", ["<!channel>", "<!here>", "<!everyone>", "<@U123ABC>", "<!subteam^S1>", "<#C1>"])
def test_control_sequences_are_neutralised(ping: str) -> None:
    for out in (to_mrkdwn(f"hey {ping}"), escape(ping), code_block(ping)):
        assert ping not in out
        assert "&lt;" in out


@pytest.mark.parametrize("word", ["@here", "@channel", "@everyone", "@Here"])
def test_bare_broadcast_words_get_a_word_joiner(word: str) -> None:
    assert word not in to_mrkdwn(f"ping {word} now")
    assert WORD_JOINER in to_mrkdwn(f"ping {word} now")


def test_links_only_for_http() -> None:
    assert "<javascript:" not in to_mrkdwn("[x](javascript:alert(1))")


def test_unclosed_code_fence_is_closed() -> None:
    assert to_mrkdwn("```\ncode").endswith("```")


def test_code_block_cannot_be_broken_out_of() -> None:
    block = code_block("a ``` b")
    assert block.count("```") == 2


def test_shorten_says_what_it_left_out() -> None:
    out = shorten("x" * 5_000, 1_000)
    assert len(out) <= 1_000 and "more characters not shown" in out
    assert shorten("short", 1_000) == "short"


def test_split_keeps_everything_in_order_within_the_limit() -> None:
    text = "\n\n".join(f"para {i} " + "word &amp; " * 60 for i in range(40))
    pieces = split(text, SECTION_LIMIT)
    assert all(len(p) <= SECTION_LIMIT for p in pieces)
    assert "".join("".join(p.split()) for p in pieces) == "".join(text.split())
    assert all(not p.endswith("&amp") and not p.endswith("&") for p in pieces)


def test_split_reopens_code_blocks() -> None:
    text = "```\n" + "line of code\n" * 600 + "```"
    pieces = split(text, 2_000)
    assert len(pieces) > 2
    assert all(p.startswith("```") and p.rstrip().endswith("```") for p in pieces)
    assert all(len(p) <= 2_000 for p in pieces)


def test_split_does_not_cut_a_link() -> None:
    link = "<https://example.com/" + "a" * 80 + "|label>"
    text = ("x" * 60 + " ") * 10 + link + " tail"
    for piece in split(text, 700):
        assert piece.count("<") == piece.count(">")
