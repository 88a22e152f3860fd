"""Real files made on the spot for the file-reading tests and ``bench/file_extract.py``: PDFs written by hand
(text pages, a page tree that loops, a truncated file), a DOCX from python-docx, and a DOCX zip bomb."""

from __future__ import annotations

import io
import struct
import wave
import zipfile
import zlib


def wav_bytes(seconds: int, rate: int = 100) -> bytes:
    """A real WAV file of ``seconds`` of silence (a low rate keeps it small; its header says its length)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(b"\x80" * seconds * rate)
    return out.getvalue()


def pdf_bytes(pages: list[str]) -> bytes:
    """A PDF with one page per string, each drawn in Helvetica (a line per ``\\n``): pypdf reads the text back."""
    count = len(pages)
    # Objects: 1 catalog, 2 page tree, 3 font, then a page and its content stream per page.
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    kids = []
    for index, text in enumerate(pages):
        page_id, content_id = 4 + 2 * index, 5 + 2 * index
        kids.append(f"{page_id} 0 R")
        lines = [_pdf_string(line) for line in text.split("\n")]
        ops = "BT /F1 11 Tf 14 TL 50 780 Td " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
        stream = ops.encode("latin-1")
        objects[page_id] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {content_id} 0 R >>"
        ).encode()
        objects[content_id] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
    objects[2] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {count} >>".encode()
    return _pdf_file(objects)


def looping_pdf() -> bytes:
    """A PDF whose page tree contains itself: a naive reader recurses or loops forever."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        3: b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R 3 0 R] /Count 2 >>",
    }
    return _pdf_file(objects)


def docx_bytes(paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for row, values in zip(grid.rows, table, strict=True):
            for cell, value in zip(row.cells, values, strict=True):
                cell.text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_bomb(unpacked_mb: int = 300) -> bytes:
    """A DOCX-shaped zip whose document part inflates to ``unpacked_mb`` MB of zeros (a few hundred KB packed)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            chunk = b"\0" * (1024 * 1024)
            for _ in range(unpacked_mb):
                part.write(chunk)
    return out.getvalue()


def _pdf_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _pdf_file(objects: dict[int, bytes]) -> bytes:
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets.get(number, 0)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def lying_docx_bomb(unpacked_mb: int = 300, declared: int = 1024) -> bytes:
    """A real DOCX whose document part declares ``declared`` bytes (and the CRC of that many zeros) but inflates
    to ``unpacked_mb`` MB: a check of the declared sizes lets it through."""
    source = zipfile.ZipFile(io.BytesIO(docx_bytes(["x"])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for info in source.infolist():
            if info.filename != "word/document.xml":
                archive.writestr(info.filename, source.read(info))
        with archive.open("word/document.xml", "w") as part:
            chunk = b"\0" * (1024 * 1024)
            for _ in range(unpacked_mb):
                part.write(chunk)
    data = bytearray(out.getvalue())
    crc = zlib.crc32(b"\0" * declared)
    # The sizes and CRC stand in the part's local header (offsets 14 and 22) and central directory entry (16, 24).
    local = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("word/document.xml").header_offset
    central = data.rindex(b"PK\x01\x02", 0, data.rindex(b"word/document.xml"))  # the last entry is the part
    struct.pack_into("<I", data, local + 14, crc)
    struct.pack_into("<I", data, local + 22, declared)
    struct.pack_into("<I", data, central + 16, crc)
    struct.pack_into("<I", data, central + 24, declared)
    return bytes(data)


def xlsx_bytes(sheets: dict[str, list[list[object]]]) -> bytes:
    """A workbook written by openpyxl, one sheet per entry, rows of values."""
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def picture_pdf(pages: int = 2) -> bytes:
    """A PDF whose pages are pictures only (Pillow writes each image as a page): a scan, with no text layer."""
    from PIL import Image, ImageDraw

    images = []
    for number in range(pages):
        image = Image.new("RGB", (600, 800), "white")
        ImageDraw.Draw(image).text((50, 50), f"Invoice total on page {number + 1}: 1,234.00", fill="black")
        images.append(image)
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:])
    return out.getvalue()


def big_png(width: int = 7000, height: int = 7000) -> bytes:
    """A white RGB PNG of ``width`` × ``height`` pixels (49 M by default) in about 190 KB, written row by row."""
    squeeze = zlib.compressobj(9)
    row = b"\0" + b"\xff" * (3 * width)
    body = b"".join(squeeze.compress(row) for _ in range(height)) + squeeze.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", body) + _png_chunk(b"IEND", b"")


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def iso_media(major: bytes, compatible: tuple[bytes, ...] = (), handlers: tuple[bytes, ...] = ()) -> bytes:
    """The start of an ISO-BMFF file (MP4, MOV, M4A, AVIF, HEIC): its ``ftyp`` box, and a ``moov`` with a track
    per handler (``vide``, ``soun``), as a camera or a recorder writes them."""

    def box(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", 8 + len(body)) + kind + body

    ftyp = box(b"ftyp", major + b"\0\0\0\0" + b"".join(compatible))
    tracks = b"".join(box(b"trak", box(b"mdia", box(b"hdlr", bytes(8) + h + bytes(12) + b"\0"))) for h in handlers)
    return ftyp + (box(b"moov", tracks) if handlers else b"") + box(b"mdat", bytes(64))
