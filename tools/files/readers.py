"""The reader child: the parsers that turn a file's bytes into text, or an image into one fit for the model.

PDF, DOCX and XLSX parsers and image decoders are large and can be led into loops or huge allocations by a hostile
file, so they run in a child process started for one file (``tools.files.child``), under a memory cap and a CPU
limit it sets on itself (``resource.setrlimit``): whatever the file does, it ends in that process, never in the
worker. The parent runs this file as a script (``python -P readers.py KIND LIMIT MAX_MEMORY CPU_SECONDS``, the
bytes on stdin, JSON on stdout; ``LIMIT`` is the most characters read, or an image's longest side), so it imports
only the standard library and the parsers, never the ``tools`` package.
"""

from __future__ import annotations

import base64
import csv
import json
import struct
import sys
import zipfile
import zlib
from io import BytesIO, StringIO
from typing import Any

#: A DOCX or XLSX is a zip: more entries, or more bytes once inflated, than any real document has is a zip bomb.
ZIP_MAX_ENTRIES = 5000
ZIP_MAX_INFLATED = 200 * 1024 * 1024
#: A spreadsheet is read up to this many rows (blank ones included), cells and columns per row.
XLSX_MAX_ROWS = 100_000
XLSX_MAX_CELLS = 500_000
XLSX_MAX_COLUMNS = 200
#: The most pixels an image may declare (a 48-megapixel photo passes; a bomb's header does not).
MAX_PIXELS = 50_000_000
#: A PDF page with fewer characters of text than this and a picture on it is a picture (a scan, a photo).
PICTURE_PAGE_CHARS = 20
#: Exit status of a child that ran out of memory while reading (it still says so on stdout when it can).
EXIT_MEMORY = 3
_CHUNK = 1024 * 1024
_SHOWN_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "AVIF")
_JPEG_QUALITY = 85


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


def read_pdf(data: bytes, max_chars: int) -> dict[str, Any]:
    """The text of each page until ``max_chars`` characters are read, whether it stopped short, and the pages
    that are pictures (a scan has no text to read)."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(BytesIO(data))
    except Exception as exc:  # pypdf raises many types for broken files; all mean the same to the user
        raise Unreadable(f"it is not a readable PDF ({_reason(exc)})") from exc
    if reader.is_encrypted and not _decrypted(reader):
        raise Unreadable("the PDF is encrypted with a password")
    pages: list[str] = []
    pictures: list[int] = []
    total = 0
    try:
        for number, page in enumerate(reader.pages, 1):
            text = (page.extract_text() or "").strip()
            if len(text) < PICTURE_PAGE_CHARS and _has_images(page):
                pictures.append(number)
            pages.append(text[: max_chars - total])
            total += len(pages[-1])
            if total >= max_chars:
                return {"pages": pages, "truncated": True, "pictures": pictures}
    except RecursionError as exc:
        raise Unreadable("the PDF's page tree loops back on itself") from exc
    except Exception as exc:
        raise Unreadable(f"the PDF is damaged ({_reason(exc)})") from exc
    return {"pages": pages, "truncated": False, "pictures": pictures}


def _decrypted(reader: Any) -> bool:
    # Many "encrypted" PDFs only restrict printing or copying and open with the empty user password.
    try:
        return bool(reader.decrypt(""))
    except Exception:
        return False


def _has_images(page: Any) -> bool:
    try:
        return len(page.images) > 0  # image XObjects (in forms too) and inline images, listed, not decoded
    except Exception:
        return False


def check_zip(data: bytes, label: str) -> None:
    """Refuse a zip bomb by what its parts inflate to, counted as they are inflated, before a parser reads them.

    A part's declared size is a claim: ``zipfile`` inflates a part's whole stream before it cuts it to that size,
    so a part declaring 1 KB can take 300 MB. Every part is inflated here in 1 MB steps and refused as soon as it
    holds more than it declares, or all of them more than ``ZIP_MAX_INFLATED``."""
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise Unreadable(f"it is not a readable {label} ({_reason(exc)})") from exc
    if len(entries) > ZIP_MAX_ENTRIES:
        raise Unreadable(f"the {label} holds {len(entries)} parts (a zip bomb?); at most {ZIP_MAX_ENTRIES} are read")
    declared = sum(entry.file_size for entry in entries)
    if declared > ZIP_MAX_INFLATED:
        raise Unreadable(f"the {label} unpacks to {declared // _CHUNK} MB (a zip bomb?); "
                         f"at most {ZIP_MAX_INFLATED // _CHUNK} MB are read")
    for entry in entries:
        if _inflated_size(data, entry, label) > entry.file_size:
            raise Unreadable(f"a part of the {label} ({entry.filename[:80]!r}) inflates to more than the "
                             f"{entry.file_size:,} bytes it declares (a zip bomb?)")


def _inflated_size(data: bytes, entry: zipfile.ZipInfo, label: str) -> int:
    """How many bytes ``entry`` inflates to, counted up to one step past its declared size."""
    try:
        magic, name_length, extra_length = struct.unpack_from("<4s22xHH", data, entry.header_offset)
    except struct.error:
        magic = b""
    if magic != b"PK\x03\x04":
        raise Unreadable(f"the {label} is damaged (a part's header is missing)")
    start = entry.header_offset + 30 + name_length + extra_length
    pending = memoryview(data)[start : start + entry.compress_size]
    if entry.compress_type == zipfile.ZIP_STORED:
        return len(pending)
    if entry.compress_type != zipfile.ZIP_DEFLATED:
        raise Unreadable(f"the {label} uses a compression no {label} uses (method {entry.compress_type})")
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    inflated = 0
    try:
        while inflated <= entry.file_size:
            piece = inflater.decompress(pending, _CHUNK)
            inflated += len(piece)
            pending = memoryview(inflater.unconsumed_tail)
            if inflater.eof or not (pending or piece):
                break
    except zlib.error as exc:
        raise Unreadable(f"the {label} is damaged ({_reason(exc)})") from exc
    return inflated


def read_docx(data: bytes, max_chars: int) -> dict[str, Any]:
    """The document's paragraphs and tables, in order, as one page of text; and whether it was cut."""
    check_zip(data, "DOCX")
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
    return {"pages": [text[:max_chars]], "truncated": len(text) > max_chars}


def read_xlsx(data: bytes, max_chars: int) -> dict[str, Any]:
    """Each sheet's values (formulas as last calculated) as CSV under a ``## Sheet: name`` line, one page, up to
    ``max_chars`` characters and the row, cell and column caps; and whether it was cut."""
    check_zip(data, "XLSX")
    import openpyxl

    try:
        workbook = openpyxl.load_workbook(BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:
        raise Unreadable(f"it is not a readable XLSX ({_reason(exc)})") from exc
    out = StringIO()
    writer = csv.writer(out, lineterminator="\n")
    rows = cells = 0
    truncated = False
    try:
        for sheet in workbook.worksheets:
            out.write(f"## Sheet: {sheet.title}\n")
            if hasattr(sheet, "reset_dimensions"):
                sheet.reset_dimensions()  # the declared size is a claim too: rows are read as they come
            for values in sheet.iter_rows(values_only=True):
                rows, cells = rows + 1, cells + len(values)
                truncated = len(values) > XLSX_MAX_COLUMNS or truncated
                if any(value is not None for value in values):
                    writer.writerow(["" if v is None else v for v in values[:XLSX_MAX_COLUMNS]])
                if rows >= XLSX_MAX_ROWS or cells >= XLSX_MAX_CELLS or out.tell() > max_chars:
                    raise _Full
            out.write("\n")
    except _Full:
        truncated = True
    except Exception as exc:
        raise Unreadable(f"the XLSX is damaged ({_reason(exc)})") from exc
    finally:
        workbook.close()
    text = out.getvalue().strip()
    return {"pages": [text[:max_chars]], "truncated": truncated or len(text) > max_chars}


class _Full(Exception):
    """A cap of ``read_xlsx`` was reached."""


def prepare_image(data: bytes, max_side: int) -> dict[str, Any]:
    """The image scaled so its longer side is at most ``max_side``, as PNG (screenshots, transparency: text stays
    sharp) or JPEG (photos), base64; its size, and the size it had."""
    from PIL import Image, ImageOps

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS  # Pillow's own check, past twice this, backs up ours
    try:
        with Image.open(BytesIO(data), formats=_SHOWN_FORMATS) as image:
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise Unreadable(f"the image declares {width} × {height} pixels, more than the {MAX_PIXELS:,} "
                                 "that are decoded (a decompression bomb?)")
            photo_format = image.format in ("JPEG", "WEBP", "AVIF")
            # Scaled as it is decoded (JPEG's draft, else reduce): the full-size picture is never copied.
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            picture = ImageOps.exif_transpose(image)  # phone photos: stored sideways, shown upright
        alpha = picture.mode in ("RGBA", "LA", "PA") or "transparency" in picture.info
        photo = photo_format and not alpha
        out = BytesIO()
        if photo:
            picture.convert("RGB").save(out, "JPEG", quality=_JPEG_QUALITY, optimize=True)
        else:
            picture.convert("RGBA" if alpha else "RGB").save(out, "PNG", optimize=True)
    except (Unreadable, MemoryError):
        raise
    except Image.DecompressionBombError as exc:
        raise Unreadable(f"the image declares more pixels than are decoded ({exc}) (a decompression bomb?)") from exc
    except Exception as exc:  # a hostile image may break Pillow anywhere (decoder, EXIF, encoder)
        raise Unreadable(f"the image cannot be decoded ({type(exc).__name__}: {_reason(exc)})") from exc
    return {"data": base64.b64encode(out.getvalue()).decode("ascii"), "mimetype": f"image/{'jpeg' if photo else 'png'}",
            "width": picture.width, "height": picture.height, "source": [width, height]}


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _limit(max_memory: int, cpu_seconds: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
    # The parent kills the child at its time limit; this bound holds even if the parent is gone.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))


_READERS = {"pdf": read_pdf, "docx": read_docx, "xlsx": read_xlsx, "image": prepare_image}


def main(argv: list[str]) -> int:
    """The child: read ``KIND LIMIT MAX_MEMORY CPU_SECONDS``, the bytes on stdin; answer JSON on stdout."""
    kind, limit, max_memory, cpu_seconds = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    _limit(max_memory, cpu_seconds)
    sys.setrecursionlimit(2000)  # a looping structure ends as RecursionError well before the C stack does
    data = sys.stdin.buffer.read()
    answer: dict[str, Any]
    try:
        answer = _READERS[kind](data, limit)
    except Unreadable as exc:
        answer = {"error": str(exc)}
    except MemoryError:
        answer = {"error": f"reading it needs more than the {max_memory // _CHUNK} MB memory limit"}
        sys.stdout.write(json.dumps(answer))
        return EXIT_MEMORY
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
