"""The readers that turn a file's bytes into text, and the child process ``tools.files.extract`` runs them in.

PDF and DOCX parsers are large and can be led into loops or huge allocations by a hostile file, so they run
in a child process started for one file, under a memory cap and a CPU limit it sets on itself
(``resource.setrlimit``): whatever the file does, it ends in that process, never in the worker. The parent
runs this file as a script (``python -P readers.py KIND MAX_CHARS MAX_MEMORY CPU_SECONDS``, the bytes on
stdin, JSON on stdout), so it imports only the standard library and the parsers, never the ``tools`` package.
"""

from __future__ import annotations

import json
import sys
import zipfile
from io import BytesIO
from typing import Any

#: A DOCX is a zip: more entries, or more bytes once uncompressed, than any real document has is a zip bomb.
DOCX_MAX_ENTRIES = 5000
DOCX_MAX_UNCOMPRESSED = 200 * 1024 * 1024
#: Exit status of a child that ran out of memory while reading (it still says so on stdout when it can).
EXIT_MEMORY = 3


class Unreadable(Exception):
    """The file cannot be read; the message is for the user."""


def decode_text(data: bytes) -> str:
    """Text bytes as ``str``: by byte-order mark, else UTF-8, else Latin-1 (which decodes any bytes)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    if data.startswith(b"\xef\xbb\xbf"):
        return data.decode("utf-8-sig", errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def read_pdf(data: bytes, max_chars: int) -> tuple[list[str], bool]:
    """The text of each page, until ``max_chars`` characters are read; and whether it stopped short."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(BytesIO(data))
    except Exception as exc:  # pypdf raises many types for broken files; all mean the same to the user
        raise Unreadable(f"it is not a readable PDF ({_reason(exc)})") from exc
    if reader.is_encrypted and not _decrypted(reader):
        raise Unreadable("the PDF is encrypted with a password")
    pages: list[str] = []
    total = 0
    try:
        for page in reader.pages:
            text = (page.extract_text() or "").strip()
            pages.append(text[: max_chars - total])
            total += len(pages[-1])
            if total >= max_chars:
                return pages, True
    except RecursionError as exc:
        raise Unreadable("the PDF's page tree loops back on itself") from exc
    except Exception as exc:
        raise Unreadable(f"the PDF is damaged ({_reason(exc)})") from exc
    return pages, False


def _decrypted(reader: Any) -> bool:
    # Many "encrypted" PDFs only restrict printing or copying and open with the empty user password.
    try:
        return bool(reader.decrypt(""))
    except Exception:
        return False


def check_zip(data: bytes) -> None:
    """Refuse a zip bomb from the central directory alone, before anything is decompressed.

    The sizes it declares bound what Python's ``zipfile`` will inflate (it stops at the declared size), so
    checking them is enough."""
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise Unreadable(f"it is not a readable DOCX ({_reason(exc)})") from exc
    if len(entries) > DOCX_MAX_ENTRIES:
        raise Unreadable(f"the DOCX holds {len(entries)} parts (a zip bomb?); at most {DOCX_MAX_ENTRIES} are read")
    unpacked = sum(entry.file_size for entry in entries)
    if unpacked > DOCX_MAX_UNCOMPRESSED:
        raise Unreadable(
            f"the DOCX unpacks to {unpacked // (1024 * 1024)} MB (a zip bomb?); "
            f"at most {DOCX_MAX_UNCOMPRESSED // (1024 * 1024)} MB are read"
        )


def read_docx(data: bytes, max_chars: int) -> tuple[list[str], bool]:
    """The document's paragraphs and tables, in order, as one page of text; and whether it was cut."""
    check_zip(data)
    import docx
    from docx.table import Table

    try:
        document = docx.Document(BytesIO(data))
        blocks: list[str] = []
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                blocks.extend(" | ".join(cell.text.strip() for cell in row.cells) for row in block.rows)
            else:
                blocks.append(block.text)
    except Exception as exc:
        raise Unreadable(f"it is not a readable DOCX ({_reason(exc)})") from exc
    text = "\n".join(blocks).strip()
    return [text[:max_chars]], len(text) > max_chars


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _limit(max_memory: int, cpu_seconds: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
    # The parent kills the child at its time limit; this bound holds even if the parent is gone.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))


def main(argv: list[str]) -> int:
    """The child: read ``KIND MAX_CHARS MAX_MEMORY CPU_SECONDS``, the bytes on stdin; answer JSON on stdout."""
    kind, max_chars, max_memory, cpu_seconds = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    _limit(max_memory, cpu_seconds)
    sys.setrecursionlimit(2000)  # a looping structure ends as RecursionError well before the C stack does
    data = sys.stdin.buffer.read()
    answer: dict[str, Any]
    try:
        pages, truncated = read_pdf(data, max_chars) if kind == "pdf" else read_docx(data, max_chars)
        answer = {"pages": pages, "truncated": truncated}
    except Unreadable as exc:
        answer = {"error": str(exc)}
    except MemoryError:
        answer = {"error": f"reading it needs more than the {max_memory // (1024 * 1024)} MB memory limit"}
        sys.stdout.write(json.dumps(answer))
        return EXIT_MEMORY
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
