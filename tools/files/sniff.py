"""What a file is, from its bytes: the magic numbers of the types the agent reads, the name only for text.

Slack's ``mimetype`` and the file's name are claims anyone can make; a "report.pdf" that is really a PNG is
read as the PNG it is. Text has no magic number, so bytes that decode as text are named from the extension
(``text/csv``, ``application/json``, ``text/markdown``, else ``text/plain``).
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["image", "text", "pdf", "docx", "audio", "other"]

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
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
    if data[4:8] == b"ftyp":  # ISO media: M4A/MP4 audio and video share it
        return "audio/mp4"
    if data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "audio/mpeg"
    if data.startswith(b"PK\x03\x04"):
        return DOCX if _is_docx(data) else ZIP
    if _looks_like_text(data[:_TEXT_PROBE]):
        extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        return _TEXT_TYPES.get(extension, "text/plain")
    return OCTET


def kind_of(mimetype: str) -> Kind:
    """What the agent does with a type: shows it (image), reads it (text, pdf, docx), transcribes it (audio)."""
    base = mimetype.split(";", 1)[0].strip().lower()
    if base in ("image/png", "image/jpeg", "image/gif", "image/webp"):
        return "image"
    if base == PDF:
        return "pdf"
    if base == DOCX:
        return "docx"
    if base.startswith("text/") or base in _TEXT_APPLICATION:
        return "text"
    if base.startswith("audio/"):
        return "audio"
    return "other"


def _is_docx(data: bytes) -> bool:
    # The part names stand in the zip's headers as plain bytes: a scan at memchr speed, where parsing the
    # central directory of a crafted zip with a million entries would hold the event loop for seconds.
    return b"[Content_Types].xml" in data and b"word/document.xml" in data


def _looks_like_text(head: bytes) -> bool:
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf")):  # a byte-order mark
        return True
    if b"\x00" in head:
        return False
    # Bytes below 0x20 other than tab, newline, form feed and carriage return mark a binary file.
    controls = sum(1 for byte in head if byte < 0x20 and byte not in (9, 10, 12, 13))
    return controls <= len(head) // 100
