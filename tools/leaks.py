"""Does outbound text carry private text? Long distinctive tokens, word runs and secret shapes
(``tools.leak_shapes``: card numbers, phone numbers, labelled passwords, PINs and codes), through the encodings an
exfiltration uses: URL-encoding (nested), base64 (standard or URL-safe, padded or not, at any alignment),
hex, base32, character codes, fullwidth letters, reversal, ROT13 (``tools.leak_decoders``), and splitting across
path segments or query parameters (across calls: ``tools.leak_split``).

``LeakIndex`` is built once from the private text a run has read; ``find`` checks one outbound string::

    index = LeakIndex(["U2: the deploy key is ghp_9fK2x7Qm and ships 2024-06-30"])
    index.find("https://example.com/steal?d=Z2hwXzlmSzJ4N1Ft")   # Leak('ghp_9f…7Qm', 'base64')
    index.find("https://example.com/docs/deploy-keys")          # None: ordinary words are not private

What counts as private is kept narrow on purpose, so ordinary URLs and searches do not trip it: a token of
at least ``MIN_TOKEN_CHARS`` letters and digits that mixes both, is a long number, is snake_case, or is
long and mixed-case (ids, keys, codes, dates), or a run of ``PHRASE_WORDS`` words in the private text's
order (sentences). Common words alone never match. A labelled value shorter than that (a PIN, an MFA code)
matches only as a whole word of the outbound text.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote_plus

from tools.leak_decoders import transcodings, variants
from tools.leak_shapes import secret_values

#: Shortest token (letters and digits, separators dropped) that counts as private.
MIN_TOKEN_CHARS = 8
#: Mixed-case tokens (``ProjectBlueHeron``) count from this length: shorter ones are product names.
MIN_MIXED_CASE_CHARS = 16
#: Any token this long counts, whatever its characters.
MIN_ANY_TOKEN_CHARS = 24
#: Long tokens are also matched by any window of this many characters holding a letter and a digit, so
#: half of a key is caught too.
WINDOW_CHARS = 12
#: A run of this many words of the private text, in order, is a sentence leaking.
PHRASE_WORDS = 6
#: Shortest base64 or hex run worth decoding (12 base64 characters carry 9 bytes).
MIN_ENCODED_CHARS = 12
#: Decoding goes at most this deep (base64 of URL-encoded text of base64...).
MAX_DEPTH = 3
#: Most characters of decodings scanned for one text, as a multiple of its length (plus a floor); past it
#: the text counts as a leak: nothing honest nests encodings that much, and the check stays bounded.
MAX_DECODED_FACTOR, MIN_DECODED_BUDGET = 64, 200_000
#: The ``Leak.encoding`` of a text with more encoded parts than the check will decode.
TOO_MANY = "too many encoded parts to check"

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*")
_WORD = re.compile(r"[a-z0-9]+")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_BASE64_RUN = re.compile(rf"[A-Za-z0-9+/_-]{{{MIN_ENCODED_CHARS},}}={{0,2}}")
_UNREADABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")
_QUERY_VALUE = re.compile(r"=([^&;=#?]*)")
_HEX_RUN = re.compile(rf"(?:[0-9a-fA-F]{{2}}){{{MIN_ENCODED_CHARS // 2},}}")


@dataclass(frozen=True, slots=True)
class Leak:
    """Private text found in outbound text."""

    #: The private token or phrase, masked (its first characters and length): safe to log and post.
    fragment: str
    #: How it was carried: ``plain``, ``url-encoded``, ``base64``, ``hex``, ``base32``, ``character codes``,
    #: ``reversed``, ``ROT13``, ``split over calls``... (outermost layer first).
    encoding: str


class LeakIndex:
    """The distinctive tokens and word runs of some private text, minus those of ``exempt`` text."""

    def __init__(self, private: Iterable[str], exempt: Iterable[str] = ()) -> None:
        exempt_tokens: set[str] = set()
        exempt_phrases: set[tuple[str, ...]] = set()
        exempt_squashed: list[str] = []
        for text in exempt:
            exempt_tokens.update(distinctive_tokens(text))
            exempt_phrases.update(_phrases(text))
            exempt_squashed.append(_NON_ALNUM.sub("", text.lower()))
        self._tokens: set[str] = set()
        self._phrases: set[tuple[str, ...]] = set()
        #: Labelled values too short for a token (PINs, MFA codes): matched as whole words only.
        self._short: set[str] = set()
        for text in private:
            self._tokens.update(t for t in distinctive_tokens(text) if t not in exempt_tokens)
            self._phrases.update(p for p in _phrases(text) if p not in exempt_phrases)
            for value in secret_values(text):
                if not any(value in mine for mine in exempt_squashed):  # the requester's own words never count
                    (self._tokens if len(value) >= MIN_TOKEN_CHARS else self._short).add(value)
        #: A token's disguises (reversed, ROT13) -> (the token, the disguise's name), matched like tokens.
        self._variants: dict[str, tuple[str, str]] = {}
        for kept in (self._tokens, self._short):
            self._add_variants(kept)
        # Lookups by window: the first MIN_TOKEN_CHARS characters of each token find it in O(1).
        self._by_prefix: dict[str, list[str]] = {}
        self._windows: dict[str, str] = {}
        for token in self._tokens:
            self._index(token)

    def _add_variants(self, kept: set[str]) -> None:
        """Each token's disguises join ``kept``, remembered with the token they disguise."""
        for token in list(kept):
            for variant, name in variants(token):
                self._variants.setdefault(variant, (token, name))
                kept.add(variant)

    def _index(self, token: str) -> None:
        self._by_prefix.setdefault(token[:MIN_TOKEN_CHARS], []).append(token)
        for i in range(len(token) - WINDOW_CHARS + 1):
            window = token[i : i + WINDOW_CHARS]
            if _has_letter_and_digit(window):
                self._windows.setdefault(window, token)

    def __bool__(self) -> bool:
        return bool(self._tokens or self._phrases or self._short)

    def find(self, text: str) -> Leak | None:
        """The first private token or phrase ``text`` carries, in any of the encodings; None when clean."""
        if not self or not text:
            return None
        for surface, encoding in decodings(text):
            if encoding == TOO_MANY:
                return Leak("", TOO_MANY)
            found = self._match(surface)
            if found is not None:
                token, disguise = self._variants.get(found, (found, ""))
                if disguise:
                    encoding = disguise if encoding == "plain" else f"{encoding}, {disguise}"
                return Leak(_mask(token), encoding)
        return None

    def _match(self, surface: str) -> str | None:
        lowered = surface.lower()
        # Separators dropped, so a token split over path segments or parameters reads whole again.
        squashed = _NON_ALNUM.sub("", lowered)
        starts = {squashed[i : i + MIN_TOKEN_CHARS] for i in range(len(squashed) - MIN_TOKEN_CHARS + 1)}
        for start in starts & self._by_prefix.keys():
            for token in self._by_prefix[start]:
                if token in squashed:
                    return token
        windows = {squashed[i : i + WINDOW_CHARS] for i in range(len(squashed) - WINDOW_CHARS + 1)}
        for window in windows & self._windows.keys():
            return self._windows[window]
        for phrase in _phrases(lowered):
            if phrase in self._phrases:
                return " ".join(phrase)
        if self._short:
            words = {_NON_ALNUM.sub("", m.group()) for m in _TOKEN.finditer(lowered)}
            for word in words & self._short:
                return word
        return None


def distinctive_tokens(text: str) -> set[str]:
    """The tokens of ``text`` that would identify it (lower-cased, separators dropped)."""
    found = set()
    for match in _TOKEN.finditer(text):
        raw = match.group()
        squashed = _NON_ALNUM.sub("", raw.lower())
        if len(squashed) >= MIN_TOKEN_CHARS and _distinctive(raw, squashed):
            found.add(squashed)
    return found


def decodings(text: str) -> Iterator[tuple[str, str]]:
    """``text`` and the decodings of it or of its parts, each with how it was encoded (outermost first).

    Every decoding is yielded; only readable ones are decoded further, which keeps the work near linear.
    Past its budget it yields one ``("", TOO_MANY)`` marker and stops.
    """
    budget = max(MIN_DECODED_BUDGET, MAX_DECODED_FACTOR * len(text))
    seen: set[str] = set()
    queue: list[tuple[str, str, int]] = [(text, "plain", 0)]
    while queue:
        surface, encoding, depth = queue.pop(0)
        if surface in seen:
            continue
        seen.add(surface)
        budget -= len(surface)
        if budget < 0:
            yield "", TOO_MANY
            return
        yield surface, encoding
        if depth >= MAX_DEPTH or (depth and not _readable(surface)):
            continue
        unquoted = unquote_plus(surface)
        layers = [(unquoted, "url-encoded")] if unquoted != surface else []
        layers += [(decoded, "base64") for decoded in _base64_decodings(surface)]
        layers += [(decoded, "hex") for decoded in _hex_decodings(surface)]
        layers += list(transcodings(surface))
        values = "".join(_QUERY_VALUE.findall(surface))
        if values:  # a token split over parameters reads whole from their values alone
            layers.append((values, "split over parameters"))
        for decoded, name in layers:
            queue.append((decoded, name if encoding == "plain" else f"{encoding}, {name}", depth + 1))


def _base64_decodings(surface: str) -> Iterator[str]:
    runs = {m.group() for m in _BASE64_RUN.finditer(surface)}
    # Base64 split over path segments or parameters: the runs joined again.
    joined = "".join(re.findall(r"[A-Za-z0-9+_-]+", surface))
    if len(joined) >= MIN_ENCODED_CHARS:
        runs.add(joined)
    for run in runs:
        body = run.rstrip("=").replace("-", "+").replace("_", "/")
        for variant in {body, body.replace("/", "")}:
            # The encoded text may start anywhere in the run: try every alignment of a 4-character group.
            for offset in range(4):
                chunk = variant[offset:]
                chunk = chunk[: len(chunk) - len(chunk) % 4]
                if len(chunk) < MIN_ENCODED_CHARS - 4:
                    continue
                try:
                    yield _text(base64.b64decode(chunk, validate=True))
                except (binascii.Error, ValueError):
                    continue


def _hex_decodings(surface: str) -> Iterator[str]:
    for match in _HEX_RUN.finditer(surface):
        run = match.group()
        for offset in (0, 1):
            chunk = run[offset:]
            yield _text(bytes.fromhex(chunk[: len(chunk) - len(chunk) % 2]))


def _text(raw: bytes) -> str:
    # Undecodable bytes become U+FFFD, a separator: the text either side of them still matches.
    return raw.decode("utf-8", errors="replace")


def _readable(text: str) -> bool:
    """Mostly printable: worth decoding further (a decoding at the wrong alignment is noise)."""
    return bool(text) and len(_UNREADABLE.findall(text)) <= 0.2 * len(text)


def _distinctive(raw: str, squashed: str) -> bool:
    if _has_letter_and_digit(squashed) or squashed.isdigit() or "_" in raw:
        return True
    if len(squashed) >= MIN_MIXED_CASE_CHARS and any(c.isupper() for c in raw[1:]) and any(c.islower() for c in raw):
        return True
    return len(squashed) >= MIN_ANY_TOKEN_CHARS


def _has_letter_and_digit(text: str) -> bool:
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def _phrases(text: str) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + PHRASE_WORDS]) for i in range(len(words) - PHRASE_WORDS + 1)}


def _mask(fragment: str) -> str:
    # Enough to recognise it in the private text, too little to carry it anywhere.
    return f"{fragment[:3]}… ({len(fragment)} characters)"
