"""The disguises ``tools.leaks.decodings`` undoes beyond URL-encoding, base64 and hex: base32 (a DNS label's
favourite), character codes (``122,101,116,97``, ``\\x7a\\x65``, ``&#122;``), fullwidth and other compatibility
forms of letters (``ｚｅｔａ``); and the reversed and ROT13 forms of a private token, which the index holds.

Each function returns ``(text, name)`` pairs; none returns its input unchanged.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import html
import re
import unicodedata
from collections.abc import Iterator

#: Shortest base32 run worth decoding (16 characters carry 10 bytes).
MIN_BASE32_CHARS = 16
#: Fewest character codes in a row that read as text (fewer are a list of numbers).
MIN_CHAR_CODES = 5

_BASE32_RUN = re.compile(rf"[A-Za-z2-7]{{{MIN_BASE32_CHARS},}}=*")
# Base32 split over DNS labels or path segments: the pieces of one URL-ish chunk, joined again.
_BASE32_CHUNK = re.compile(r"[A-Za-z2-7./_-]+")  # one character class: no backtracking on long runs
_DECIMAL_CODES = re.compile(rf"(?<![\d.])(?:\d{{2,3}}[\s,;.:/_|-]{{1,3}}){{{MIN_CHAR_CODES - 1},}}\d{{2,3}}(?![\d.])")
_NUMBER = re.compile(r"\d+")
_ESCAPED_CODES = re.compile(r"(?:\\x|0x|\\u00|U\+00)([0-9a-fA-F]{2})")
_ENTITY = re.compile(r"&#x?[0-9a-fA-F]+;?")


def transcodings(surface: str) -> Iterator[tuple[str, str]]:
    """Decodings that may hide further layers (decoded again by the caller)."""
    normal = unicodedata.normalize("NFKC", surface)
    if normal != surface:
        yield normal, "fullwidth or compatibility characters"
    for decoded in _base32_decodings(surface):
        yield decoded, "base32"
    codes = _char_codes(surface)
    if codes != surface:
        yield codes, "character codes"


def variants(token: str) -> Iterator[tuple[str, str]]:
    """A private token reversed and ROT13 (and both), each with its name. Matched as index entries rather than by
    rewriting every outbound text three more times: same catch, a quarter of the work."""
    rot = codecs.encode(token, "rot13")
    for variant, name in ((token[::-1], "reversed"), (rot, "ROT13"), (rot[::-1], "ROT13, reversed")):
        if variant != token:
            yield variant, name


def _base32_decodings(surface: str) -> Iterator[str]:
    runs = {m.group().rstrip("=") for m in _BASE32_RUN.finditer(surface)}
    runs.update(joined for m in _BASE32_CHUNK.finditer(surface)
                if len(joined := re.sub(r"[./_-]", "", m.group())) >= MIN_BASE32_CHARS and joined != m.group())
    for run in runs:
        upper = run.upper()
        # The encoded text may start anywhere in the run: try every alignment of an 8-character group.
        for offset in range(8):
            chunk = upper[offset:]
            chunk = chunk[: len(chunk) - len(chunk) % 8]
            if len(chunk) < MIN_BASE32_CHARS - 8:
                continue
            try:
                yield base64.b32decode(chunk).decode("utf-8", errors="replace")
            except (binascii.Error, ValueError):
                continue


def _char_codes(surface: str) -> str:
    """``surface`` with runs of character codes (decimal, ``\\xNN``/``0xNN``, HTML entities) as their letters."""
    text = surface
    if "&#" in text:
        text = _ENTITY.sub(lambda m: html.unescape(m.group() if m.group().endswith(";") else m.group() + ";"), text)
    if len(_ESCAPED_CODES.findall(text)) >= MIN_CHAR_CODES:
        text = _ESCAPED_CODES.sub(lambda m: _printable(int(m.group(1), 16), m.group()), text)
    return _DECIMAL_CODES.sub(lambda m: _NUMBER.sub(lambda n: _printable(int(n.group()), n.group()), m.group()), text)


def _printable(code: int, otherwise: str) -> str:
    return chr(code) if 32 <= code < 127 else otherwise
