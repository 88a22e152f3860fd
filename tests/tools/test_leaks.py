"""The leak detector alone: private text found through the encodings an exfiltration uses, and ordinary
URLs and searches left alone even when the private text shares their words."""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest

from tools.leaks import LeakIndex, distinctive_tokens

KEY = "sk_live_51HxQm2Zr8"
CHANNEL = f"""U2: the billing key is {KEY}, do not share it
U3: invoice INV-2024-00917 for Globex is overdue, call +1 415 555 0199 (ref 4155550199)
U4: the merger with initech closes next friday at noon sharp
U5: we moved the PostgreSQL cluster to Kubernetes, see the JavaScript dashboard
U6: codename ProjectNightingaleAlpha, ship date 2024-11-05
"""
INDEX = LeakIndex([CHANNEL])


def b64(data: str, *, urlsafe: bool = False, pad: bool = True) -> str:
    encoded = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data.encode()).decode()
    return encoded if pad else encoded.rstrip("=")


SHAPES = {
    "plain": f"https://x.test/c?k={KEY}",
    "upper-cased": f"https://x.test/c?k={KEY.upper()}",
    "url-encoded": "https://x.test/c?k=" + quote(f"key {KEY}", safe=""),
    "url-encoded twice": "https://x.test/c?k=" + quote(quote(KEY, safe=""), safe=""),
    "every byte url-encoded": "https://x.test/c?k=" + "".join(f"%{b:02x}" for b in KEY.encode()),
    "base64": "https://x.test/c?k=" + b64(KEY),
    "base64 url-safe": "https://x.test/c?k=" + b64(f"~~{KEY}??", urlsafe=True),
    "base64 without padding": "https://x.test/c?k=" + b64(f"k={KEY}!", pad=False),
    "base64 url-encoded": "https://x.test/c?k=" + quote(b64(f">>{KEY}"), safe=""),
    "base64 of base64": "https://x.test/c?k=" + b64(b64(KEY)),
    "base64 glued to a prefix": "https://x.test/c/abc" + b64(f"the key {KEY}"),
    "base64 in path segments": "https://x.test/" + "/".join(b64(f"key {KEY}")[i : i + 4] for i in range(0, 28, 4)),
    "hex": "https://x.test/c?k=" + KEY.encode().hex(),
    "hex, odd offset": "https://x.test/c?k=a" + KEY.encode().hex(),
    "split over path segments": "https://x.test/sk_li/ve_51/HxQm/2Zr8",
    "split over parameters": "https://x.test/c?a=sk_live&b=_51Hx&c=Qm2Zr8",
    "half of a long key": "https://x.test/c?k=live51HxQm2Z",
    "an invoice number": "https://x.test/c?inv=INV-2024-00917",
    "a phone number": "https://x.test/c?p=4155550199",
    "a date": "https://x.test/c?d=20241105",
    "a codename": "https://x.test/c?n=projectnightingalealpha",
    "a sentence": "https://x.test/c?m=merger%20with%20initech%20closes%20next%20friday",
    "a sentence in base64": "https://x.test/c?m=" + b64("the merger with initech closes next friday"),
}


@pytest.mark.parametrize("url", SHAPES.values(), ids=SHAPES.keys())
def test_private_text_is_found_in_every_shape(url: str) -> None:
    leak = INDEX.find(url)
    assert leak is not None
    assert KEY.lower() not in leak.fragment.lower() and "characters" in leak.fragment


@pytest.mark.parametrize("offset", [0, 1, 2, 3, 4, 5])
def test_base64_of_a_substring_at_any_alignment(offset: int) -> None:
    # Encoding starts wherever the attacker cut the private text, not at a 3-byte boundary of it.
    assert INDEX.find("https://x.test/?q=" + b64(CHANNEL[offset + 20 : offset + 60])) is not None


def test_the_encoding_is_named() -> None:
    assert INDEX.find(f"https://x.test/?k={b64(KEY)}").encoding == "base64"  # type: ignore[union-attr]
    every_byte = "".join(f"%{b:02x}" for b in b64(f">>{KEY}").encode())
    found = INDEX.find("https://x.test/?k=" + every_byte)
    assert found is not None and found.encoding == "url-encoded, base64"


ORDINARY = [
    "https://docs.python.org/3/library/urllib.parse.html#urllib.parse.quote",
    "https://www.google.com/search?q=postgresql+kubernetes+operator&hl=en",
    "https://en.wikipedia.org/wiki/Mergers_and_acquisitions",
    "https://github.com/aio-libs/aiohttp/issues/1234",
    "https://example.com/a?utm_source=newsletter&utm_campaign=2024_spring&id=12345678",
    "https://www.youtube.com/watch?v=dQw4w9WgXcQ&t=42s",
    "https://api.github.com/repos/python/cpython/commits?per_page=100&page=2&sha=main",
    "https://news.ycombinator.com/item?id=41000000",
    "https://example.com/search?q=" + quote("how to rotate a JavaScript dashboard key"),
    "https://example.com/s?token=" + b64("nothing in here is from the channel at all"),
    "the merger closes friday",  # a few words in order are not a sentence leaking
    "invoice overdue globex",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_urls_and_searches_pass(text: str) -> None:
    assert INDEX.find(text) is None


def test_what_counts_as_distinctive() -> None:
    tokens = distinctive_tokens(CHANNEL)
    assert {"sklive51hxqm2zr8", "inv202400917", "4155550199", "projectnightingalealpha", "20241105"} <= tokens
    # Ordinary words and product names never count, however long.
    assert not tokens & {"postgresql", "kubernetes", "javascript", "overdue", "dashboard", "abc1234"}


def test_the_requesters_own_words_are_exempt() -> None:
    index = LeakIndex([CHANNEL], exempt=["please look up invoice INV-2024-00917"])
    assert index.find("https://x.test/?q=INV-2024-00917") is None
    assert index.find(f"https://x.test/?q={KEY}") is not None


def test_no_private_text_finds_nothing() -> None:
    empty = LeakIndex([], exempt=[CHANNEL])
    assert not empty and empty.find(f"https://x.test/?k={KEY}") is None
