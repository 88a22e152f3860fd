"""read_file: the text of a file given to the run (``ToolContext.files``), whole or in parts.

Large files are read through this tool rather than pasted into the task: the model asks for PDF pages or a
range of lines or characters, and the answer is capped and shaped like any observation. Files are private
data, so a result arms the exfiltration guard (``reads_private_data``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import OrderedDict

from pydantic import BaseModel, ConfigDict, Field

from tools.context import RunFile, ToolContext
from tools.errors import FileUnreadable, ToolError
from tools.executor import DEFAULT_OBSERVATION_MAX_CHARS
from tools.files import Extracted, extract, kind_of
from tools.registry import tool

#: One extraction's time limit: under the tool's own, so a stalling file ends with the reader's message.
EXTRACT_TIMEOUT_SECONDS = 20.0
#: The most text read from one PDF or DOCX (a book of about a thousand pages).
EXTRACT_MAX_CHARS = 4_000_000
#: The longest answer: past it the answer stops and says how to read on (the trace and the guard's index of
#: private text keep whole answers, so a whole 10 MB CSV must not become one).
MAX_ANSWER_CHARS = 100_000
#: Extracted PDFs and DOCX kept for the next call on the same bytes (the model reads a file in several calls).
_CACHE_ENTRIES = 16
_CACHE_CHARS = 8_000_000
_RANGE = re.compile(r"^\s*(?:(lines?|chars?|characters?)\s*:?\s*)?(\d+)?\s*(-)?\s*(\d+)?\s*$", re.IGNORECASE)


class ReadFileError(ToolError):
    """read_file was asked for a file the run does not have, a part the file does not have, or a non-text file."""


class ReadFileArgs(BaseModel):
    """Arguments of the read_file tool."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="The file's name as listed in the task, e.g. report.pdf.")
    pages: str | None = Field(
        None, description="PDF pages to read, numbered from 1: '3', '2-5', '7-' or '1,4,9-12'. Omit for all."
    )
    range: str | None = Field(
        None,
        description="Part of the text: lines 'A-B' (numbered from 1, e.g. '120-180'; '120-' to the end) or "
        "characters 'chars A-B'. Omit for all.",
    )


@tool(name="read_file", timeout=30.0, reads_private_data=True)
async def read_file(args: ReadFileArgs, ctx: ToolContext) -> str:
    """Read a file given in this conversation: text, CSV, JSON, Markdown, code, PDF, Word (DOCX) or Excel (XLSX).

    Reads the whole file, some PDF pages, or a range of lines or characters; for a large file, read the pages or
    lines you need rather than all of it.
    """
    file = _find(ctx, args.name)
    if file.note:
        raise ReadFileError(f"{file.name} cannot be read: {file.note}")
    kind = kind_of(file.mimetype)
    if kind == "image":
        raise ReadFileError(
            f"{file.name} is an image ({file.mimetype}), not text: it was shown to you as an image with the task"
        )
    if kind in ("audio", "video"):
        raise ReadFileError(f"{file.name} is {kind} ({file.mimetype}): read_file reads only text, PDF, Word and "
                            "Excel files")
    if kind == "other":
        raise ReadFileError(
            f"{file.name} is a {file.mimetype} file: read_file reads only text (CSV, JSON, Markdown, code), "
            "PDF, Word (DOCX) and Excel (XLSX) files"
        )
    extracted = await _extracted(file)
    return _answer(file, kind, extracted, args.pages, args.range)


def _find(ctx: ToolContext, name: str) -> RunFile:
    if not ctx.files:
        raise ReadFileError("there are no files in this conversation")
    found = ctx.files.get(name) or ctx.files.get(name.strip())
    if found is None:
        raise ReadFileError(f"no file named {name!r}; the files in this conversation: {', '.join(ctx.files)}")
    return found


def _answer(file: RunFile, kind: str, extracted: Extracted, pages: str | None, span: str | None) -> str:
    count = len(extracted.pages)
    if kind == "pdf" and not extracted.text.strip():
        return f"{file.name} ({count} pages) has no text layer (a scanned document?): its pages are images"
    chosen = list(range(1, count + 1))
    if pages is not None:
        if kind != "pdf" and pages.strip() != "1":
            raise ReadFileError(f"{file.name} has no pages (only PDFs do): ask for a range of lines instead")
        chosen = _page_numbers(pages, count, file.name)
    if kind == "pdf":
        plural = "s" if len(chosen) > 1 else ""
        label = f"{count} pages" if pages is None else f"page{plural} {pages.strip()} of {count}"
        text = "\n\n".join(f"--- page {n} ---\n{extracted.pages[n - 1]}" for n in chosen)
    else:
        label, text = file.mimetype, extracted.text
    if span is not None:
        part, text = _span(text, span, file.name)
        label += f", {part}"
    header = f"{file.name} ({label}, {len(text):,} characters)"
    if extracted.truncated:
        header += f"; only the first {len(extracted.text):,} characters of the file were read"
    if extracted.pictures:
        header += (f"; {extracted.pictures_label()}: pictures with no text layer (a scan?), what they show cannot "
                   "be read")
    if len(text) > MAX_ANSWER_CHARS:
        text = text[:MAX_ANSWER_CHARS]
        header += f"; this answer stops after {MAX_ANSWER_CHARS:,}: read on with range or pages"
    elif len(text) > DEFAULT_OBSERVATION_MAX_CHARS and span is None and pages is None:
        header += "; long: read the parts you need with range (lines) or pages"
    return f"{header}:\n\n{text}"


def _page_numbers(spec: str, count: int, name: str) -> list[int]:
    """'1,4,9-12' as page numbers, each checked against the page count."""
    numbers: list[int] = []
    for item in spec.split(","):
        match = _RANGE.fullmatch(item)
        if match is None or match.group(1) or not (match.group(2) or match.group(4)):
            raise ReadFileError(f"pages {spec!r} is not a page list like '3', '2-5', '7-' or '1,4,9-12'")
        first = int(match.group(2) or 1)
        last = int(match.group(4) or count) if match.group(3) else first
        if first < 1 or last < first:
            raise ReadFileError(f"pages {item.strip()!r} is not a range of pages (they are numbered from 1)")
        if first > count or last > count:
            raise ReadFileError(f"{name} has {count} page{'s' if count != 1 else ''}: page {max(first, last)} "
                                "is out of range")
        numbers.extend(n for n in range(first, last + 1) if n not in numbers)
    return numbers


def _span(text: str, spec: str, name: str) -> tuple[str, str]:
    """The lines or characters ``spec`` names (numbered from 1, inclusive), and how to say which they are."""
    match = _RANGE.fullmatch(spec)
    if match is None or not (match.group(2) or match.group(4)):
        raise ReadFileError(f"range {spec!r} is not like '120-180' (lines), '120-' or 'chars 5000-9000'")
    chars = bool(match.group(1)) and match.group(1).lower().startswith("c")
    units = text if chars else text.splitlines()
    unit = "characters" if chars else "lines"
    first = int(match.group(2) or 1)
    last = int(match.group(4) or len(units)) if match.group(3) else first
    if first < 1 or last < first:
        raise ReadFileError(f"range {spec!r} is not a range of {unit} (they are numbered from 1)")
    if first > len(units):
        raise ReadFileError(f"{name} has {len(units):,} {unit}: {first} is out of range")
    last = min(last, len(units))
    part = units[first - 1 : last]
    body = part if isinstance(part, str) else "\n".join(part)
    return f"{unit} {first}-{last} of {len(units):,}", body


_cache: OrderedDict[bytes, Extracted | str] = OrderedDict()


async def _extracted(file: RunFile) -> Extracted:
    if kind_of(file.mimetype) == "text":  # decoding is cheap: no cache needed
        return await extract(file.data, file.mimetype, timeout=EXTRACT_TIMEOUT_SECONDS, max_chars=len(file.data))
    # The key is the bytes' digest, so one run's file never answers for another's, whatever their names.
    key = await asyncio.to_thread(_digest, file.data, file.mimetype)
    cached = _cache.get(key)
    if cached is None:
        try:
            cached = await extract(
                file.data, file.mimetype, timeout=EXTRACT_TIMEOUT_SECONDS, max_chars=EXTRACT_MAX_CHARS
            )
        except FileUnreadable as exc:  # remembered too: a file built to stall the reader stalls it once
            cached = str(exc)
        _remember(key, cached)
    _cache.move_to_end(key)
    if isinstance(cached, str):
        raise FileUnreadable(f"{file.name}: {cached}")
    return cached


def _digest(data: bytes, mimetype: str) -> bytes:
    return hashlib.blake2b(data, digest_size=20, person=mimetype.encode()[:16]).digest()


def _remember(key: bytes, value: Extracted | str) -> None:
    _cache[key] = value
    while len(_cache) > _CACHE_ENTRIES or (
        len(_cache) > 1 and sum(len(v.text) if isinstance(v, Extracted) else 0 for v in _cache.values()) > _CACHE_CHARS
    ):
        _cache.popitem(last=False)
