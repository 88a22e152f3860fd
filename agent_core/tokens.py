"""Offline token counting: exact where the model's encoding is at hand, calibrated elsewhere.

tiktoken downloads its rank files on first use, which fails without a network. The ``bpe-openai``
package ships the o200k_base and cl100k_base files, so they are loaded from there (hash-checked) and
given to tiktoken. A model that is not one of OpenAI's (a gateway alias, a self-hosted model) is counted
with o200k_base, a general-purpose tokenizer, and its counts carry a margin (:data:`GENERAL_MARGIN`) until the
provider's reported usage corrects them (``agent_core.budget.calibration``). ``OPENAI_TOKENIZER`` names the tokenizer
instead. When no rank file can be loaded, the count falls back to the text's UTF-8 byte length: every
byte-level BPE token covers at least one byte, so that is a true upper bound (about four times too high on
English text, until the provider's usage corrects it).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import json
import logging
import pathlib
import struct
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: Chat format overhead (OpenAI's published accounting): per message, and once to prime the reply.
TOKENS_PER_MESSAGE = 4
TOKENS_REPLY_PRIMING = 3

_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
# Same hashes tiktoken itself checks for these files.
_ENCODINGS = {
    "o200k_base": (
        _O200K_PATTERN,
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": (
        _CL100K_PATTERN,
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
         "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    ),
}


#: ``OPENAI_TOKENIZER`` values: ``auto`` (the model's own encoding, else o200k_base with a margin), an encoding,
#: or ``bytes`` (the UTF-8 upper bound).
TOKENIZERS = ("auto", "o200k_base", "cl100k_base", "bytes")
#: The margin on counts made with a tokenizer that is not the model's own, until the provider's usage reports
#: correct it: other tokenizers (Llama 3, Qwen, Mistral's) take up to about a quarter more tokens than
#: o200k_base on English text and code.
GENERAL_MARGIN = 1.25


class TokenCounter(Protocol):
    exact: bool
    #: What a count is multiplied by for a budget hold until the provider's usage corrects it (1.0: exact, or
    #: already an upper bound).
    margin: float

    def count(self, text: str) -> int: ...


class ByteUpperBound:
    """UTF-8 length: an upper bound on any byte-level BPE token count."""

    exact = False
    name = "utf8-bytes-upper-bound"
    margin = 1.0  # already an upper bound

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))


class TiktokenCounter:
    """Exact counts with a tiktoken encoding; repeated texts (the history) are counted once."""

    exact = True
    margin = 1.0

    def __init__(self, encoding: Any, *, exact: bool = True) -> None:
        self.name = str(encoding.name)
        # Another model's tokenizer: a close count, not the model's own.
        self.exact, self.margin = (True, 1.0) if exact else (False, GENERAL_MARGIN)
        # These two encodings never join a newline to what follows it where _count_by_lines cuts.
        self.splits_at_lines = getattr(encoding, "_pat_str", None) in (_O200K_PATTERN, _CL100K_PATTERN)
        encode = encoding.encode_ordinary

        @lru_cache(maxsize=8192)
        def count(text: str) -> int:
            return len(encode(text))

        self._count = count
        # A text seen whole before is one lookup; a new one costs only its new lines.
        self._lines = lru_cache(maxsize=1024)(self._count_by_lines) if self.splits_at_lines else count

    def count(self, text: str) -> int:
        return self._count(text)

    def count_lines(self, text: str) -> int:
        """``count(text)``, for a text rebuilt with a few lines changed (see :func:`count_lines`)."""
        return self._lines(text)

    def _count_by_lines(self, text: str) -> int:
        # The cut is after a newline whose next line starts, after spaces, with neither whitespace nor "/":
        # the o200k and cl100k pre-tokenizers never put such a newline and what follows it in one piece.
        lines = text.split("\n")
        total, piece = 0, lines[0]
        for line in lines[1:]:
            start = line.lstrip(" ")
            if start and not start[0].isspace() and start[0] != "/":
                total += self._count(piece + "\n")
                piece = line
            else:
                piece = f"{piece}\n{line}"
        return total + self._count(piece)


def _encoding_for_model(model: str) -> str | None:
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5")):
        return "cl100k_base"
    return None


@lru_cache(maxsize=4)
def _load_encoding(name: str) -> Any | None:
    try:
        import tiktoken
    except ImportError:
        return None
    pattern, sha256, special = _ENCODINGS[name]
    # Located without importing bpe_openai: its __init__ loads every encoding it has (slow, and warns).
    spec = importlib.util.find_spec("bpe_openai")
    try:
        if spec is None or spec.origin is None:
            raise FileNotFoundError("bpe_openai is not installed")
        data = gzip.decompress((pathlib.Path(spec.origin).parent / "data" / f"{name}.tiktoken.gz").read_bytes())
    except OSError:
        log.warning("no offline rank file for %s; token counts use the UTF-8 byte upper bound", name)
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        log.warning("rank file for %s failed its hash check; using the UTF-8 byte upper bound", name)
        return None
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in data.splitlines() if line)}
    return tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)


def counter_for(model: str, tokenizer: str = "auto") -> TokenCounter:
    """The best offline counter for ``model``: exact for OpenAI models, o200k_base with :data:`GENERAL_MARGIN` for
    others; ``tokenizer`` (``OPENAI_TOKENIZER``) names one instead. The UTF-8 upper bound when none loads."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"OPENAI_TOKENIZER must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}")
    if tokenizer == "bytes":
        return ByteUpperBound()
    own = _encoding_for_model(model)
    name = own if tokenizer == "auto" else tokenizer
    encoding = _load_encoding(name or "o200k_base")
    exact = name is not None and name == own
    return TiktokenCounter(encoding, exact=exact) if encoding is not None else ByteUpperBound()


def count_messages(counter: TokenCounter, messages: Iterable[Mapping[str, Any]]) -> int:
    """Prompt tokens of a message list, with the chat format's per-message overhead."""
    total = TOKENS_REPLY_PRIMING
    for message in messages:  # a loop, not sum() over a generator: this runs over the run's messages each step
        total += count_message(counter, message)
    return total


def count_message(counter: TokenCounter, message: Mapping[str, Any]) -> int:
    """One message's share of a list's prompt tokens (its overhead included, the reply priming not)."""
    total = TOKENS_PER_MESSAGE
    content = message.get("content")
    if isinstance(content, str):
        total += counter.count(content)
    elif isinstance(content, list):
        total += _count_parts(counter, content)
    elif content is not None:
        total += counter.count(json.dumps(content, ensure_ascii=False))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        total += TOKENS_PER_MESSAGE + counter.count(function.get("name", ""))
        total += counter.count(function.get("arguments", ""))
    return total


def count_lines(counter: TokenCounter, text: str) -> int:
    """``counter.count(text)``, counted line by line where the counter can, so unchanged lines are cache hits.

    A text rebuilt at every step with a line or two changed (the progress note) is otherwise encoded whole
    each time; other counters count it whole.
    """
    if isinstance(counter, TiktokenCounter):
        return counter.count_lines(text)
    return counter.count(text)


def count_tools(counter: TokenCounter, tools: list[dict[str, Any]] | None) -> int:
    """Tokens the tool schemas add to a request (their JSON text: close to, and not under, the real cost)."""
    if not tools:
        return 0
    return counter.count(json.dumps(tools, separators=(",", ":"), ensure_ascii=False))


#: OpenAI's documented cost of an image part at ``detail: high``: a base, plus each 512-pixel tile of the image
#: once scaled to fit 2048×2048 and then so its shorter side is at most 768.
IMAGE_BASE_TOKENS, IMAGE_TILE_TOKENS = 85, 170
#: The most any image costs by that formula (768×2048: 8 tiles), for an image whose size cannot be read.
IMAGE_MAX_TOKENS = IMAGE_BASE_TOKENS + 8 * IMAGE_TILE_TOKENS


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens of a ``width``×``height`` image part, by OpenAI's formula for high detail."""
    if width <= 0 or height <= 0:
        return IMAGE_MAX_TOKENS
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * (-(-int(w) // 512)) * (-(-int(h) // 512))


def _count_parts(counter: TokenCounter, parts: list[Any]) -> int:
    total = 0
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text":
            total += counter.count(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            url = part.get("image_url", {}).get("url", "")
            total += _data_url_tokens(url) if isinstance(url, str) else IMAGE_MAX_TOKENS
        else:
            total += counter.count(json.dumps(part, ensure_ascii=False))
    return total


@lru_cache(maxsize=64)  # the task's image is counted at every step; a str's hash is cached, so this is a lookup
def _data_url_tokens(url: str) -> int:
    """An image part's tokens from the size in its data URL's header (its base64 text is not tokens)."""
    head, _, payload = url.partition(",")
    if not head.startswith("data:") or not head.endswith(";base64"):
        return IMAGE_MAX_TOKENS  # a remote URL: its size is unknown here
    try:
        data = base64.b64decode(payload[: 64 * 1024 // 3 * 4], validate=False)
    except ValueError:
        return IMAGE_MAX_TOKENS
    size = image_size(data)
    return image_tokens(*size) if size is not None else IMAGE_MAX_TOKENS


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF or JPEG header (the first bytes suffice); None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data.startswith(b"\xff\xd8"):
        i = 2
        while i + 9 <= len(data) and data[i] == 0xFF:
            marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return width, height
            i += 2 + length
    return None
