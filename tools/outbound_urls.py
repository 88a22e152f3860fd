"""Destinations in the text of an outbound call, as the exfiltration guard reads them: URLs with or without a
scheme and e-mail addresses found in arguments, each normalised to (destination, host), and a host matched
against a workspace host list."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from yarl import URL

from tools.ssrf import parse_ip_literal

_URL = re.compile(r"""\b[A-Za-z][A-Za-z0-9+.-]*://[^\s<>"'`|\\]+""")
_BARE_URL = re.compile(r"(?<![\w@./:-])(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}/[^\s<>\"'`|\\]*")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}")
_TRAILING = ".,;:!?)]}>'\""


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def urls_in(text: str) -> Iterator[str]:
    """Destinations in text: URLs with a scheme (Slack's ``<url|label>`` too), ``host.tld/path`` without one,
    and e-mail addresses (as ``mailto:``)."""
    for match in _URL.finditer(text):
        yield match.group().rstrip(_TRAILING)
    rest = _URL.sub(" ", text)
    for match in _BARE_URL.finditer(rest):
        yield "http://" + match.group().rstrip(_TRAILING)
    for match in _EMAIL.finditer(rest):
        yield f"mailto:{match.group()}"


def all_urls(text: str) -> Iterator[str]:
    """``urls_in``, also with HTML entities decoded: Slack sends ``&`` in message text as ``&amp;``."""
    yield from urls_in(text)
    if "&" in text:
        yield from urls_in(html.unescape(text))


def destination(raw: str) -> tuple[str, str] | None:
    """(the destination normalised, its host), or None when it names no host."""
    raw = raw.strip()
    if raw.lower().startswith("mailto:"):
        address = raw[len("mailto:"):].lower()
        return (f"mailto:{address}", address.rpartition("@")[2].rstrip(".")) if "@" in address else None
    try:
        url = URL(raw)
    except ValueError:
        return None
    if not url.host:
        return None
    return str(url.with_fragment(None)), url.host.lower().rstrip(".")


def normal(raw: str) -> str:
    """``raw`` as it is compared with the requester's URLs: normalised when it names a host, else stripped."""
    dest = destination(raw)
    return dest[0] if dest is not None else raw.strip()


def listed(host: str, domains: Iterable[str]) -> bool:
    """``host`` is one of ``domains`` or a subdomain of one (names only: an address matches exactly)."""
    if not host:
        return False
    for entry in domains:
        domain = entry.strip().lower().rstrip(".")
        if domain and (host == domain or (host.endswith("." + domain) and parse_ip_literal(host) is None)):
            return True
    return False
