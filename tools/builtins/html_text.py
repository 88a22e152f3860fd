"""HTML → readable text with the standard library's ``html.parser`` (scripts, styles and markup dropped).

Small on purpose: headings become ``#`` lines, list items ``- `` lines, links ``[text](url)`` so the
model can follow them, and block elements line breaks. Whitespace is collapsed except inside ``<pre>``.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

#: Elements whose content is never text for a reader.
_SKIP = frozenset(
    {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas", "select"}
)
_BLOCK = frozenset(
    "address article aside blockquote br dd div dl dt fieldset figcaption figure footer form h1 h2 h3 h4 h5 "
    "h6 header hr li main nav ol p pre section table tbody td th thead tr ul".split()
)
_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n\s*(\n\s*)+")


class _Extractor(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skip = 0
        self._pre = 0
        self._in_title = False
        self._links: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "pre":
            self._pre += 1
        if self._skip or tag in _VOID and tag not in _BLOCK:
            return
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.parts.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self.parts.append("- ")
        elif tag == "a":
            href = dict(attrs).get("href") or ""
            self._links.append((len(self.parts), href))

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if tag == "title":
            self._in_title = False
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        elif tag == "a" and self._links:
            self._close_link(*self._links.pop())
        if tag in _BLOCK and not self._skip:
            self.parts.append("\n")

    def _close_link(self, start: int, href: str) -> None:
        text = " ".join("".join(self.parts[start:]).split())
        target = urljoin(self.base_url, href.strip()) if href.strip() else ""
        if text and target.startswith(("http://", "https://")) and target != text:
            self.parts[start:] = [f"[{text}]({target})"]

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title_parts.append(data)
            return
        self.parts.append(data if self._pre else _SPACES.sub(" ", data.replace("\n", " ")))


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """(title, text) of an HTML document; links are made absolute against ``base_url``."""
    parser = _Extractor(base_url)
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    lines = [line.rstrip() for line in text.split("\n")]
    text = _BLANK_LINES.sub("\n\n", "\n".join(line if line.strip() else "" for line in lines)).strip()
    title = " ".join("".join(parser.title_parts).split())
    return title, re.sub(r"\n{3,}", "\n\n", text)
