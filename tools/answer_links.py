"""Links in an armed run's answer: a link the reader did not ask for is shown as text, never as a link.

A hijacked model that may not fetch a URL can still put one in its answer, as ``[the report](https://host/?d=…)``,
Slack's ``<https://host/?d=…|the report>`` or a bare URL: one click (or an unfurl, or an image a client loads)
and the data has left. Once the run has read private data, every link whose target is not allowed (``allowed``:
the exfiltration guard's destination rule) is rewritten as its label followed by the URL in inline code, which
no Slack client turns into a link or fetches::

    >>> neutralise("see [the report](https://evil.example/?d=k3y)", lambda url: False)
    'see the report (`https://evil.example/?d=k3y`)'

Code is left as it is: nothing in it is a link. Renderers disagree on unbalanced backticks (Slack's Markdown
pairs runs of equal length, ``bot.mrkdwn`` the nearest, and it reads any line starting with three backticks as
a fence), so only what both read as code counts (``_CODE``): a fence at the margin with at most a language after
it, through lines none of which could be a fence, to a bare closing fence or the end of the text; an inline span
on one line between two lone runs of one or two backticks with no backtick in it. Every other backtick becomes
``'``, and the code spans made here never touch a backtick, so the result reads the same to both, and again.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: Code, left alone: fenced blocks and inline spans, as the module's docstring says. A body line that starts
#: like a fence (``~~~`` too: Slack's Markdown has those) would end the block for one renderer only.
_CODE = re.compile(
    r"^```[ \t]*[\w+#.-]*[ \t]*\r?$(?:\n(?![^\S\n]*(?:```|~~~)).*)*(?:\n```[ \t]*\r?$|\Z)"
    r"|(?<![`\\])(`{1,2})(?!`)[^`\n]+\1(?!`)",
    re.MULTILINE,
)
_URL_BODY = r"""[^\s<>"'`|\\()\[\]]+(?:\([^\s<>"'`|\\()]*\)[^\s<>"'`|\\()\[\]]*)*"""
#: ``[label](url)`` and ``![alt](url)`` (an image a client would load by itself), a Slack ``<url|label>`` or
#: ``<url>``, a URL with a scheme, and ``host.tld/path`` without one.
_LINK = re.compile(
    r"(?P<md>!?\[(?P<md_label>[^\]\n]*)\]\(\s*<?(?P<md_url>[^\s)>]+)>?(?:\s+\"[^\"\n]*\")?\s*\))"
    r"|(?P<slack><(?P<slack_url>[A-Za-z][A-Za-z0-9+.-]*:[^\s<>|]+)(?:\|(?P<slack_label>[^<>\n]*))?>)"
    rf"|(?P<bare>\b[A-Za-z][A-Za-z0-9+.-]*://{_URL_BODY})"
    rf"|(?P<host>(?<![\w@./:-])(?:[A-Za-z0-9-]+\.)+[A-Za-z]{{2,}}(?::\d+)?/{_URL_BODY}?)"
)
_TRAILING = ".,;:!?'\""
#: Slack's own link forms that point nowhere outside: ``<@U1>``, ``<#C1>``, ``<!here>``.
_SLACK_SPECIAL = ("@", "#", "!")


def neutralise(text: str, allowed: Callable[[str], bool]) -> str:
    """``text`` with each link whose URL ``allowed`` refuses shown as text (label, then the URL as code)."""
    pieces: list[str] = []
    last = 0
    for code in _CODE.finditer(text):
        pieces += [_links(text[last : code.start()], allowed), code.group()]
        last = code.end()
    pieces.append(_links(text[last:], allowed))
    out = ""
    for piece in pieces:  # a code span made here, next to kept code: "`a``url`" would pair its runs otherwise
        out += " " + piece if out.endswith("`") and piece.startswith("`") else piece
    return out


def _links(text: str, allowed: Callable[[str], bool]) -> str:
    # A backtick outside code is unpaired: left in, it would pair with one of the code spans made here and
    # turn that span's URL back into linkable text.
    text = text.replace("`", "'")

    def one(match: re.Match[str]) -> str:
        whole = match.group()
        if match.group("md"):
            url, label = match.group("md_url"), match.group("md_label")
            return whole if allowed(url) else _shown(label, url, allowed)
        if match.group("slack"):
            url, label = match.group("slack_url"), match.group("slack_label")
            if url.startswith(_SLACK_SPECIAL) or allowed(url):
                return whole
            return _shown(label or "", url, allowed)
        url = whole.rstrip(_TRAILING)
        tail = whole[len(url):]
        if url.endswith(")") and url.count("(") < url.count(")"):  # "(see https://x/y)": the ")" is prose
            url, tail = url[:-1], ")" + tail
        target = url if match.group("bare") else f"http://{url}"
        return whole if allowed(target) else f"{_code(url)}{tail}"

    shown = _LINK.sub(one, text)

    # Its backticks are now the spans made here, in pairs. One right after another ("<u><v>") would share a run
    # of two backticks, and one after a backslash would open with an escaped backtick: a space keeps each whole.
    def apart(span: re.Match[str]) -> str:
        return " " + span.group() if shown[span.start() - 1 : span.start()] in ("`", "\\") else span.group()

    return re.sub(r"`[^`]*`", apart, shown)


def _shown(label: str, url: str, allowed: Callable[[str], bool]) -> str:
    """The label as text (its own URLs checked too), then the URL as code."""
    label = _links(label.strip(), allowed)
    if not label or label.strip("`") == url:
        return _code(url)
    return f"{label} ({_code(url)})"


def _code(url: str) -> str:
    return f"`{url}`"
