"""Markdown → Slack mrkdwn, made safe (no pings, no injected links) and split to Slack's size limits.

Everything the model or a tool wrote goes through here before it is posted: ``&``, ``<`` and ``>`` are
escaped, so ``<!channel>``, ``<!here>``, ``<!everyone>``, ``<@U123>`` and ``<#C1>`` arrive as plain text,
and bare ``@here``/``@channel``/``@everyone`` get a word joiner so no client turns them into a ping::

    >>> to_mrkdwn("**Paris** is [the capital](https://fr.example/) <!here>")
    '*Paris* is <https://fr.example/|the capital> &lt;!here&gt;'
"""

from __future__ import annotations

import re

from bot.i18n import _
from bot.markup import WORD_JOINER, escape, unping

# escape, unping and WORD_JOINER live in bot.markup (below every stage); offered here with the rest.
__all__ = ["SECTION_LIMIT", "WORD_JOINER", "code_block", "escape", "inline_code", "shorten", "split", "to_mrkdwn",
           "unping"]
#: Slack rejects a section whose text is longer than 3,000 characters.
SECTION_LIMIT = 3_000

_FENCE = re.compile(r"^\s*```")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s)]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
# A bold marker placeholder, so the italic rule does not eat the converted ``*bold*``.
_B = "\x00"


def code_block(text: str) -> str:
    """``text`` as a preformatted block; inner triple backticks are broken so they cannot end it early."""
    body = escape(text).replace("```", "`\u200b``")
    return f"```\n{body}\n```" if body else "```\n \n```"


def inline_code(text: str) -> str:
    return "`" + escape(text).replace("`", "'").replace("\n", " ") + "`"


def to_mrkdwn(markdown: str) -> str:
    """Convert the model's Markdown to mrkdwn; code (fenced or inline) keeps its text, escaped."""
    out: list[str] = []
    in_code = False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            # Slack shows no language tag, and a tag left after the fence would print as code text.
            out.append("```")
            in_code = not in_code
            continue
        out.append(escape(line).replace("```", "`\u200b``") if in_code else _convert_line(line))
    if in_code:
        out.append("```")
    return "\n".join(out)


def _convert_line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        return f"*{_convert_inline(heading.group(1)).replace('*', '')}*"
    bullet = _BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {_convert_inline(line[bullet.end():])}"
    return _convert_inline(line)


def _convert_inline(text: str) -> str:
    parts: list[str] = []
    last = 0
    for m in _INLINE_CODE.finditer(text):
        parts.append(_format(text[last : m.start()]))
        parts.append(inline_code(m.group(2)))
        last = m.end()
    parts.append(_format(text[last:]))
    return "".join(parts)


def _format(text: str) -> str:
    links: list[str] = []

    def keep_link(m: re.Match[str]) -> str:
        label = escape(m.group(1)).replace("|", "/")
        links.append(f"<{escape(m.group(2))}|{label}>")
        return f"\x01{len(links) - 1}\x01"

    text = _LINK.sub(keep_link, text)
    text = escape(text)
    text = _BOLD.sub(lambda m: f"{_B}{m.group(2)}{_B}", text)
    text = _ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = text.replace(_B, "*")
    return re.sub("\x01(\\d+)\x01", lambda m: links[int(m.group(1))], text)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was left out (for observations)."""
    if len(text) <= limit:
        return text
    # The marker's own length depends on the number it shows; 48 characters is always enough room.
    keep = max(0, limit - 48)
    return f"{text[:keep].rstrip()}\n… " + _("({n} more characters not shown)").format(n=f"{len(text) - keep:,}")


def split(text: str, limit: int = SECTION_LIMIT) -> list[str]:
    """Cut mrkdwn into pieces of at most ``limit`` characters, whole and in order.

    Cuts fall on a blank line, else a line end, else a space; never inside an ``&amp;`` entity or a
    ``<link|label>``. A piece that ends inside a code block closes it, and the next piece reopens it.
    """
    if limit < 32:
        raise ValueError(f"split limit must be at least 32 characters, got {limit!r}")
    pieces: list[str] = []
    rest = text
    reopen = False
    while rest:
        prefix = "```\n" if reopen else ""
        budget = limit - len(prefix)
        if len(rest) <= budget:
            pieces.append(prefix + rest)
            break
        # Room for a closing fence, in case this piece ends inside a code block.
        cut = _cut_point(rest, budget - 4)
        piece, rest = rest[:cut], rest[cut:].lstrip("\n")
        open_code = reopen ^ (piece.count("```") % 2 == 1)
        pieces.append(prefix + piece + ("\n```" if open_code else ""))
        reopen = open_code
    return [p for p in pieces if p.strip()] or [""]


def _cut_point(text: str, budget: int) -> int:
    window = text[:budget]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at > budget // 2:
            return _safe(text, at + len(sep))
    return _safe(text, budget)


def _safe(text: str, cut: int) -> int:
    """Move ``cut`` left so it does not fall inside an entity (``&amp;``) or a ``<...>`` link."""
    amp = text.rfind("&", max(0, cut - 6), cut)
    if amp != -1 and ";" not in text[amp:cut]:
        cut = amp
    lt = text.rfind("<", max(0, cut - 400), cut)
    if lt != -1 and ">" not in text[lt:cut] and lt > 0:
        cut = lt
    return max(cut, 1)
