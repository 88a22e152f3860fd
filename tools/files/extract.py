"""``extract``: a file's text, read off the event loop, hostile files ending in ``FileUnreadable``.

Text files are decoded in a worker thread (decoding is linear in the size; nothing in the bytes can make it
loop). PDFs, DOCX and XLSX are parsed in a child process started for the one file (``tools.files.child``) with a
time limit, a memory cap and a CPU limit: a PDF that makes the parser loop, a zip bomb, a file that wants
gigabytes, all end there with a message for the user, and the worker never blocks or runs out of memory.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tools.errors import FileUnreadable
from tools.files import readers
from tools.files.child import DEFAULT_MAX_MEMORY, run_reader
from tools.files.sniff import kind_of, sniff

#: Plain names for the types, in messages.
_LABELS = {"pdf": "a PDF", "docx": "a Word document (DOCX)", "xlsx": "an Excel spreadsheet (XLSX)", "text": "text",
           "image": "an image", "audio": "audio", "video": "a video"}


@dataclass(frozen=True, slots=True)
class Extracted:
    """A file's text: ``pages`` for a PDF (one entry per page), else one page; ``text`` is them joined."""

    text: str
    pages: tuple[str, ...]
    #: The text stopped at ``max_chars`` (or a spreadsheet's caps): there is more in the file.
    truncated: bool = False
    #: A PDF's pages (numbered from 1) that are pictures with no text to speak of: a scan's pages.
    pictures: tuple[int, ...] = ()

    @classmethod
    def of(cls, pages: list[str] | tuple[str, ...], *, truncated: bool = False,
           pictures: tuple[int, ...] = ()) -> Extracted:
        return cls("\n\n".join(pages), tuple(pages), truncated, pictures)

    def pictures_label(self) -> str:
        """The picture pages, for a note: ``all 3 pages``, ``page 2`` or ``pages 1, 4, 9`` (the first 20)."""
        count = len(self.pictures)
        if count == len(self.pages):
            return f"all {count} pages" if count > 1 else "its one page"
        numbers = ", ".join(map(str, self.pictures[:20])) + (", ..." if count > 20 else "")
        return f"page{'s' if count > 1 else ''} {numbers}"


async def extract(
    data: bytes, mimetype: str, *, timeout: float, max_chars: int, max_memory: int = DEFAULT_MAX_MEMORY
) -> Extracted:
    """The text of a text file, PDF, DOCX or XLSX (at most ``max_chars`` characters); ``FileUnreadable`` with a
    message for the user for any other type, a file that is not what ``mimetype`` says, or one that cannot be
    read within ``timeout`` seconds and ``max_memory`` bytes."""
    kind = kind_of(mimetype)
    if kind == "text":
        text = await asyncio.to_thread(readers.decode_text, data)
        return Extracted.of([text[:max_chars]], truncated=len(text) > max_chars)
    if kind not in ("pdf", "docx", "xlsx"):
        raise FileUnreadable(f"{_LABELS.get(kind, f'a {mimetype} file')} cannot be read as text")
    actual = kind_of(sniff(data))
    if actual != kind:
        found = _LABELS.get(actual, "something else")
        raise FileUnreadable(f"the file is not {_LABELS[kind]}: its content is {found}")
    answer = await run_reader(kind, data, limit=max_chars, timeout=timeout, max_memory=max_memory)
    if "error" in answer:
        raise FileUnreadable(f"could not read {_LABELS[kind]}: {answer['error']}")
    if "pages" not in answer:
        raise FileUnreadable(f"could not read {_LABELS[kind]}: the reader gave no text")
    pictures = tuple(int(n) for n in answer.get("pictures", ()))
    return Extracted.of([str(page) for page in answer["pages"]], truncated=bool(answer["truncated"]),
                        pictures=pictures)
