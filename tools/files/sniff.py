"""What a file is, from its bytes: the magic numbers of the types the agent reads, the name only for text.

Slack's ``mimetype`` and the file's name are claims anyone can make; a "report.pdf" that is really a PNG is
read as the PNG it is. Text has no magic number, so bytes that decode as text are named from the extension
(``text/csv``, ``application/json``, ``text/markdown``, else ``text/plain``).
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["image", "text", "pdf", "docx", "xlsx", "audio", "video", "other"]

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
ZIP = "application/zip"
OCTET = "application/octet-stream"

#: Prefix → type, checked in order.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", PDF),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"ID3", "audio/mpeg"),
    (b"fLaC", "audio/flac"),
    (b"OggS", "audio/ogg"),
    (b"\x1aE\xdf\xa3", "audio/webm"),  # Matroska/WebM: Slack voice clips arrive as WebM or MP4
)
#: ``ftyp`` brands: AVIF, HEIF/HEIC (``mif1``/``msf1``: any HEIF image, AVIF's too, so AVIF is asked first), and
#: the audio-only MP4 brands. Others (``isom``, ``mp41``, ``mp42``, ``qt``, 3GP...) are told apart by their tracks.
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
_AUDIO_BRANDS = frozenset({b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B "})
#: A track's handler box: size, ``hdlr``, version and flags, pre-defined, then the handler type.
_VIDEO_TRACK = re.compile(rb"hdlr.{8}vide", re.DOTALL)
#: Extension → type for bytes that are text.
_TEXT_TYPES = {
    "csv": "text/csv",
    "tsv": "text/tab-separated-values",
    "json": "application/json",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "html": "text/html",
    "htm": "text/html",
    "xml": "application/xml",
    "yaml": "application/yaml",
    "yml": "application/yaml",
}
_TEXT_APPLICATION = frozenset({"application/json", "application/xml", "application/yaml"})
#: How much of the start decides whether bytes are text.
_TEXT_PROBE = 8192


def sniff(data: bytes, name: str = "") -> str:
    """The MIME type of ``data`` from its magic bytes; for text, from ``name``'s extension."""
    for magic, mimetype in _MAGIC:
        if data.startswith(magic):
            return mimetype
    if data[:4] == b"RIFF" and data[8:12] in (b"WEBP", b"WAVE"):
        return "image/webp" if data[8:12] == b"WEBP" else "audio/wav"
    if data[4:8] == b"ftyp":  # ISO media: AVIF and HEIC images, MP4 and QuickTime video, M4A audio share it
        return _iso_media(data)
    if data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "audio/mpeg"
    if data.startswith(b"PK\x03\x04"):
        return _office(data)
    if _looks_like_text(data[:_TEXT_PROBE]):
        extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        return _TEXT_TYPES.get(extension, "text/plain")
    return OCTET


def kind_of(mimetype: str) -> Kind:
    """What the agent does with a type: shows it (image), reads it (text, pdf, docx), transcribes it (audio)."""
    base = mimetype.split(";", 1)[0].strip().lower()
    if base.startswith("image/"):
        return "image"
    if base == PDF:
        return "pdf"
    if base == DOCX:
        return "docx"
    if base == XLSX:
        return "xlsx"
    if base.startswith("text/") or base in _TEXT_APPLICATION:
        return "text"
    if base.startswith("audio/"):
        return "audio"
    if base.startswith("video/"):
        return "video"
    return "other"


def _office(data: bytes) -> str:
    # The part names stand in the zip's headers as plain bytes: a scan at memchr speed, where parsing the
    # central directory of a crafted zip with a million entries would hold the event loop for seconds.
    if b"[Content_Types].xml" not in data:
        return ZIP
    if b"word/document.xml" in data:
        return DOCX
    return XLSX if b"xl/workbook.xml" in data else ZIP


def _iso_media(data: bytes) -> str:
    """An ISO-BMFF file's type from its ``ftyp`` brands (major, then compatible) and, for the generic MP4 and
    QuickTime brands, whether a track is video (a ``vide`` handler) or sound only."""
    end = min(max(int.from_bytes(data[:4], "big"), 16), 256, len(data))
    major = data[8:12]
    brands = {major, *(data[i : i + 4] for i in range(16, end - 3, 4))}
    if brands & _AVIF_BRANDS:
        return "image/avif"
    if brands & _HEIF_BRANDS:
        return "image/heic"
    if major in _AUDIO_BRANDS:
        return "audio/mp4"
    if _VIDEO_TRACK.search(data) is None:
        return "audio/mp4"  # a voice clip or an M4A under a generic brand
    return "video/quicktime" if major == b"qt  " else "video/mp4"


def _looks_like_text(head: bytes) -> bool:
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf")):  # a byte-order mark
        return True
    if b"\x00" in head:
        return False
    # Bytes below 0x20 other than tab, newline, form feed and carriage return mark a binary file.
    controls = sum(1 for byte in head if byte < 0x20 and byte not in (9, 10, 12, 13))
    return controls <= len(head) // 100
