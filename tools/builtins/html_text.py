"""HTML → readable text in one linear pass (scripts, styles and markup dropped).

Small on purpose: headings become ``#`` lines, list items ``- `` lines, links ``[text](url)`` so the
model can follow them, and block elements line breaks. Whitespace is collapsed except inside ``<pre>``.

No tree is built. Every HTML tree builder (the standard library's, lexbor's) has inputs that cost quadratic
time: 250 KB of ``<a<a<a…`` held the event loop for 25 s, and 1 MB of nested ``<div>`` took lexbor minutes.
Here a scanner moves forward with ``str.find`` only, so the worst case is linear in the page's size, and tag
attributes are read from a bounded slice.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urljoin

#: Elements whose content is never text for a reader.
_SKIP = frozenset(
    {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas", "select"}
)
_BLOCK = frozenset(
    "address article aside blockquote br dd div dl dt fieldset figcaption figure footer form h1 h2 h3 h4 h5 "
    "h6 header hr li main nav ol p pre section table tbody td th thead tr ul".split()
)
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*(\n\s*)+")


#: Only this much of a tag's text is read for its name and ``href`` (a longer tag is kept but not parsed).
_MAX_TAG_CHARS = 4096
_TAG_NAME = re.compile(r"/?\s*([A-Za-z][A-Za-z0-9-]*)")
_HREF = re.compile(r"""\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.IGNORECASE)
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})


class _Text:
    """The output being built: text parts, the open link (HTML forbids nesting them), skip and pre depth."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.parts: list[str] = []
        self.title: list[str] = []
        self.pre = 0
        self.in_title = False
        self.link: tuple[int, str] | None = None

    def data(self, raw: str) -> None:
        for piece in _pieces(raw):
            text = unescape(piece)
            if self.in_title:
                self.title.append(text)
            else:
                self.parts.append(text if self.pre else _SPACES.sub(" ", text.replace("\n", " ")))

    def start(self, tag: str, attrs: str) -> None:
        if tag == "title":
            self.in_title = True
        elif tag == "pre":
            self.pre += 1
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag in _HEADINGS:
            self.parts.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self.parts.append("- ")
        elif tag == "a" and self.link is None:
            found = _HREF.search(attrs)
            href = next((g for g in found.groups() if g is not None), "") if found else ""
            self.link = (len(self.parts), unescape(href))

    def end(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
        elif tag == "a" and self.link is not None:
            start, href = self.link
            self.link = None
            text = " ".join("".join(self.parts[start:]).split())
            target = urljoin(self.base_url, href.strip()) if href.strip() else ""
            if text and target.startswith(("http://", "https://")) and target != text:
                self.parts[start:] = [f"[{text}]({target})"]
        if tag in _BLOCK:
            self.parts.append("\n")


#: Text is cleaned in pieces of about this size: one regex call over a whole 2 MB text run holds the GIL
#: (so the event loop) for a quarter of a second; a piece holds it for a few milliseconds.
_PIECE_CHARS = 1 << 15
#: Where a run of whitespace starts: cutting there splits no run and no character reference.
_RUN_START = re.compile(r"(?<=\S)\s")


def _pieces(raw: str) -> list[str]:
    """``raw`` cut into pieces that clean to the same text separately as together."""
    pieces, start, n = [], 0, len(raw)
    while n - start > _PIECE_CHARS:
        end = start + _PIECE_CHARS
        found = _RUN_START.search(raw, start + _PIECE_CHARS // 2, end)
        if found is not None:
            cut = found.start()
        else:  # no whitespace to cut at: anywhere but inside a character reference
            amp = raw.rfind("&", end - 40, end)
            cut = amp if amp > start else end
        pieces.append(raw[start:cut])
        start = cut
    if start < n:
        pieces.append(raw[start:])
    return pieces


def _scan(html: str, out: _Text) -> None:
    """Feed ``out`` the text and tags of ``html``; every step moves forward, so the whole pass is linear."""
    i, n = 0, len(html)
    while i < n:
        lt = html.find("<", i)
        if lt < 0:
            out.data(html[i:])
            return
        out.data(html[i:lt])
        if html.startswith("<!--", lt):
            close = html.find("-->", lt + 4)
            i = n if close < 0 else close + 3
            continue
        gt = html.find(">", lt + 1)
        if gt < 0:
            out.data(html[lt:])  # a '<' that opens no tag is text
            return
        tag_text = html[lt + 1:min(gt, lt + 1 + _MAX_TAG_CHARS)]
        i = gt + 1
        match = _TAG_NAME.match(tag_text)
        if match is None:
            if not tag_text.startswith(("!", "?")):
                out.data(html[lt:i])
            continue
        name = match.group(1).lower()
        if tag_text.startswith("/"):
            out.end(name)
        elif name in _SKIP:
            close = _find_close(html, name, i)  # a script's or style's content is never text
            i = n if close < 0 else (html.find(">", close) + 1 or n)
        else:
            out.start(name, tag_text)


def _find_close(html: str, name: str, start: int) -> int:
    """Where ``</name`` starts after ``start`` (any letter case), or -1: one forward scan."""
    pattern = re.compile(rf"</{name}\b", re.IGNORECASE)
    found = pattern.search(html, start)
    return found.start() if found else -1


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """(title, text) of an HTML document; links are made absolute against ``base_url``."""
    out = _Text(base_url)
    _scan(html, out)
    text = "".join(out.parts)
    lines = [line.rstrip() for line in text.split("\n")]
    text = _BLANK_LINES.sub("\n\n", "\n".join(line if line.strip() else "" for line in lines)).strip()
    title = " ".join("".join(out.title).split())
    return title, re.sub(r"\n{3,}", "\n\n", text)
