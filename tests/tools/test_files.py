"""Files given to a run: sniffing from the bytes, extraction in a limited child process, images made fit for the
model, and the read_file tool. Every file is real, made in the test (``tests.tools.file_samples``)."""

from __future__ import annotations

import asyncio
import io
import struct
import zlib
from dataclasses import dataclass

import pytest
from PIL import Image

from tests.tools.file_samples import docx_bomb, docx_bytes, looping_pdf, pdf_bytes
from tools import Executor, Outcome, ToolContext, ToolPolicy, ToolSettings, builtin_registry, run_registry
from tools.files import Extracted, FileUnreadable, extract, kind_of, prepare_image, sniff
from tools.files.child import DEFAULT_MAX_MEMORY
from tools.files.readers import decode_text

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def png_bytes(width: int, height: int, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (width, height), "white").save(out, "PNG")
    return out.getvalue()


def png_bomb_header(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG whose header declares ``width`` × ``height`` pixels, with one tiny IDAT: a decompression bomb."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = chunk(b"IDAT", zlib.compress(b"\0" * 64))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + pixels + chunk(b"IEND", b"")


# --- sniff and kind_of ---------------------------------------------------------------------------------------


def test_sniff_goes_by_the_bytes_not_the_name() -> None:
    assert sniff(pdf_bytes(["x"]), "notes.txt") == PDF
    assert sniff(png_bytes(4, 4), "report.pdf") == "image/png"
    assert sniff(docx_bytes(["x"]), "a.zip") == DOCX
    assert sniff(b"\xff\xd8\xff\xe0rest", "") == "image/jpeg"
    assert sniff(b"RIFF\0\0\0\0WEBPVP8 ", "") == "image/webp"
    assert sniff(b"\0\0\0\x20ftypM4A ", "clip") == "audio/mp4"
    assert sniff(b"\x00\x01\x02\x03binary", "x.csv") == "application/octet-stream"


def test_sniff_names_text_from_its_extension() -> None:
    assert sniff(b"a,b\n1,2\n", "data.csv") == "text/csv"
    assert sniff(b'{"a": 1}', "data.JSON") == "application/json"
    assert sniff(b"# Title\n", "README.md") == "text/markdown"
    assert sniff(b"def f(): pass\n", "code.py") == "text/plain"
    assert sniff("héllo".encode("utf-16"), "u16.txt") == "text/plain"


def test_kind_of() -> None:
    assert [kind_of(m) for m in ("image/png", PDF, DOCX, "text/csv; charset=utf-8", "application/json")] == [
        "image",
        "pdf",
        "docx",
        "text",
        "text",
    ]
    assert kind_of("audio/webm") == "audio" and kind_of("application/zip") == "other"


# --- extract -------------------------------------------------------------------------------------------------


async def test_pdf_text_by_page() -> None:
    data = pdf_bytes(["Quarterly revenue: 4.2M\nsecond line", "Costs (rent) went up"])
    extracted = await extract(data, PDF, timeout=20, max_chars=10_000)
    assert extracted.pages == ("Quarterly revenue: 4.2M\nsecond line", "Costs (rent) went up")
    assert extracted.text == "\n\n".join(extracted.pages) and not extracted.truncated


async def test_pdf_stops_at_max_chars() -> None:
    extracted = await extract(pdf_bytes(["a" * 50] * 10), PDF, timeout=20, max_chars=120)
    assert extracted.truncated and len(extracted.pages) == 3 and sum(map(len, extracted.pages)) == 120


async def test_docx_paragraphs_and_tables_in_order() -> None:
    data = docx_bytes(["Minutes of the meeting", "Decisions below"], table=[["who", "what"], ["Ana", "ship it"]])
    extracted = await extract(data, DOCX, timeout=20, max_chars=10_000)
    assert extracted.text == "Minutes of the meeting\nDecisions below\nwho | what\nAna | ship it"
    assert len(extracted.pages) == 1


async def test_text_files_decode_with_fallbacks() -> None:
    for data, expected in (
        (b"name,total\nA,1\n", "name,total\nA,1\n"),
        (b'{"k": "v\xc3\xa9"}', '{"k": "vé"}'),
        ("Grüße\n".encode("utf-16"), "Grüße\n"),
        (b"\xef\xbb\xbfwith bom", "with bom"),
        (b"caf\xe9 latin-1", "café latin-1"),
    ):
        extracted = await extract(data, sniff(data, "f.txt"), timeout=5, max_chars=1000)
        assert extracted.text == expected and extracted.pages == (expected,)
    assert decode_text(b"\xff\xfe") == ""


async def test_zip_bomb_docx_is_refused_before_it_is_inflated() -> None:
    bomb = docx_bomb(300)
    assert len(bomb) < 2_000_000 and sniff(bomb, "bomb.docx") == DOCX
    with pytest.raises(FileUnreadable, match=r"unpacks to 300 MB \(a zip bomb\?\)"):
        await extract(bomb, DOCX, timeout=20, max_chars=10_000)


async def test_looping_and_truncated_pdfs_are_unreadable_not_fatal() -> None:
    with pytest.raises(FileUnreadable, match="could not read a PDF"):
        await extract(looping_pdf(), PDF, timeout=20, max_chars=10_000)
    with pytest.raises(FileUnreadable, match="could not read a PDF"):
        await extract(pdf_bytes(["some text"] * 5)[:300], PDF, timeout=20, max_chars=10_000)


async def test_wrong_type_is_named() -> None:
    with pytest.raises(FileUnreadable, match="the file is not a PDF: its content is an image"):
        await extract(png_bytes(8, 8), PDF, timeout=20, max_chars=100)
    with pytest.raises(FileUnreadable, match="an image cannot be read as text"):
        await extract(png_bytes(8, 8), "image/png", timeout=20, max_chars=100)
    with pytest.raises(FileUnreadable, match="cannot be read as text"):
        await extract(b"\0\1\2", "application/octet-stream", timeout=20, max_chars=100)


async def test_a_reader_past_its_time_limit_is_killed() -> None:
    # Far less time than a Python process needs to start: the limit is what ends the call.
    with pytest.raises(FileUnreadable, match=r"took longer than 0.01 s"):
        await extract(pdf_bytes(["x"]), PDF, timeout=0.01, max_chars=100)
    assert not reader_children()


async def test_a_cancelled_extraction_kills_its_reader() -> None:
    task = asyncio.create_task(extract(pdf_bytes(["x"]), PDF, timeout=20, max_chars=100))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not reader_children()


async def test_the_memory_cap_ends_in_a_message() -> None:
    assert DEFAULT_MAX_MEMORY >= 512 * 1024 * 1024
    with pytest.raises(FileUnreadable, match="memory limit|reader stopped"):
        await extract(pdf_bytes(["x"]), PDF, timeout=20, max_chars=100, max_memory=40 * 1024 * 1024)


def reader_children() -> list[str]:
    """This process's live children running the reader script."""
    import os
    from pathlib import Path

    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and "readers.py" in cmdline and " Z " not in stat:
            found.append(cmdline)
    return found


# --- prepare_image -------------------------------------------------------------------------------------------


async def test_image_is_scaled_to_max_side_keeping_its_shape() -> None:
    image = await prepare_image(png_bytes(3000, 1500), "image/png", max_side=1000)
    assert (image.mimetype, image.width, image.height) == ("image/png", 1000, 500)
    assert (image.source_width, image.source_height) == (3000, 1500) and image.reduced
    assert Image.open(io.BytesIO(image.data)).size == (1000, 500)


async def test_small_photo_stays_its_size_as_jpeg() -> None:
    out = io.BytesIO()
    Image.new("RGB", (300, 200), "red").save(out, "JPEG")
    image = await prepare_image(out.getvalue(), "image/jpeg", max_side=1568)
    assert (image.mimetype, image.width, image.height) == ("image/jpeg", 300, 200)
    assert image.data.startswith(b"\xff\xd8") and not image.reduced


async def test_a_sideways_phone_photo_is_shown_upright() -> None:
    out = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to show
    Image.new("RGB", (400, 100), "red").save(out, "JPEG", exif=exif)
    image = await prepare_image(out.getvalue(), "image/jpeg", max_side=200)
    assert (image.width, image.height) == (50, 200)


async def test_transparency_is_kept_as_png() -> None:
    image = await prepare_image(png_bytes(50, 50, "RGBA"), "image/png", max_side=20)
    assert image.mimetype == "image/png"


async def test_decompression_bomb_is_refused_from_its_header() -> None:
    with pytest.raises(FileUnreadable, match=r"declares 8000 × 8000 pixels.*\(a decompression bomb\?\)"):
        await prepare_image(png_bomb_header(8000, 8000), "image/png", max_side=1568)  # past ours, under Pillow's
    with pytest.raises(FileUnreadable, match=r"\(a decompression bomb\?\)"):
        await prepare_image(png_bomb_header(100_000, 100_000), "image/png", max_side=1568)  # past Pillow's too


async def test_undecodable_image_is_unreadable() -> None:
    with pytest.raises(FileUnreadable, match="cannot be decoded"):
        await prepare_image(b"\x89PNG\r\n\x1a\nnot really", "image/png", max_side=100)
    with pytest.raises(FileUnreadable, match="cannot be decoded"):
        await prepare_image(png_bytes(40, 40)[:60], "image/png", max_side=100)


# --- read_file -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class File:
    name: str
    data: bytes
    mimetype: str = ""
    note: str = ""

    @classmethod
    def of(cls, name: str, data: bytes, note: str = "") -> File:
        return cls(name, data, sniff(data, name), note)


REPORT = pdf_bytes([f"Page {n}: the figure for region {n} is {n * 100}" for n in range(1, 6)])


def files_ctx(*files: File) -> ToolContext:
    return ToolContext(run_id="r1", step=1, task="read the files", files={f.name: f for f in files})


async def read(arguments: dict[str, object], ctx: ToolContext) -> tuple[Outcome, str, Executor]:
    executor = Executor(builtin_registry(ToolSettings(_env_file=None)).select(["read_file"]))
    result = await executor.execute(executor.prepare("read_file", arguments, call_id="c"), ctx)
    return result.outcome, result.text, executor


async def test_read_pdf_pages_and_arm_the_guard() -> None:
    ctx = files_ctx(File.of("report.pdf", REPORT))
    outcome, text, executor = await read({"name": "report.pdf", "pages": "2-3"}, ctx)
    assert outcome is Outcome.OK
    assert text.startswith("report.pdf (pages 2-3 of 5, ")
    assert "--- page 2 ---\nPage 2: the figure for region 2 is 200" in text and "Page 4" not in text
    assert executor.guard.armed(ctx.egress)  # files are private data


async def test_read_whole_pdf_and_page_out_of_range() -> None:
    ctx = files_ctx(File.of("report.pdf", REPORT))
    outcome, text, _ = await read({"name": "report.pdf"}, ctx)
    assert outcome is Outcome.OK and "report.pdf (5 pages" in text and "--- page 5 ---" in text
    outcome, text, executor = await read({"name": "report.pdf", "pages": "4,9"}, ctx)
    assert outcome is Outcome.ERROR and "report.pdf has 5 pages: page 9 is out of range" in text
    assert not executor.guard.armed(ctx.egress)


async def test_read_line_and_character_ranges_of_a_csv() -> None:
    csv = "\n".join(f"row{n},{n}" for n in range(1, 1001)).encode()
    ctx = files_ctx(File.of("data.csv", csv))
    outcome, text, _ = await read({"name": "data.csv", "range": "10-12"}, ctx)
    assert outcome is Outcome.OK
    assert text == "data.csv (text/csv, lines 10-12 of 1,000, 26 characters):\n\nrow10,10\nrow11,11\nrow12,12"
    _, text, _ = await read({"name": "data.csv", "range": "chars 1-9"}, ctx)
    assert text.endswith(":\n\nrow1,1\nro")
    _, text, _ = await read({"name": "data.csv", "range": "999-"}, ctx)
    assert text.endswith("row999,999\nrow1000,1000") and "lines 999-1000 of 1,000" in text
    outcome, text, _ = await read({"name": "data.csv", "range": "2000-2010"}, ctx)
    assert outcome is Outcome.ERROR and "data.csv has 1,000 lines: 2000 is out of range" in text
    outcome, text, _ = await read({"name": "data.csv", "pages": "2"}, ctx)
    assert outcome is Outcome.ERROR and "has no pages (only PDFs do)" in text


async def test_read_docx_and_json() -> None:
    ctx = files_ctx(File.of("notes.docx", docx_bytes(["Action: renew the lease"])), File.of("c.json", b'{"a": 1}'))
    _, text, _ = await read({"name": "notes.docx"}, ctx)
    assert text.endswith("Action: renew the lease")
    _, text, _ = await read({"name": "c.json"}, ctx)
    assert text == 'c.json (application/json, 8 characters):\n\n{"a": 1}'


async def test_unknown_name_lists_the_files_and_no_files_says_so() -> None:
    ctx = files_ctx(File.of("a.csv", b"x\n"), File.of("b.pdf", REPORT))
    outcome, text, _ = await read({"name": "c.pdf"}, ctx)
    assert outcome is Outcome.ERROR and "no file named 'c.pdf'; the files in this conversation: a.csv, b.pdf" in text
    outcome, text, _ = await read({"name": "c.pdf"}, ToolContext(run_id="r1", step=1))
    assert outcome is Outcome.ERROR and "there are no files in this conversation" in text


async def test_images_audio_notes_and_hostile_files_get_clear_messages() -> None:
    ctx = files_ctx(
        File.of("shot.png", png_bytes(4, 4)),
        File.of("dark.png", png_bytes(4, 4), note="this model cannot see images"),
        File.of("clip.m4a", b"\0\0\0\x20ftypM4A " + b"\0" * 64),
        File.of("bomb.docx", docx_bomb(250)),
        File.of("fake.pdf", png_bytes(4, 4)),
    )
    expected = {
        "shot.png": "shot.png is an image (image/png), not text: it was shown to you as an image with the task",
        "dark.png": "dark.png cannot be read: this model cannot see images",
        "clip.m4a": "clip.m4a is audio (audio/mp4): read_file reads only text, PDF, Word and Excel files",
        "bomb.docx": "FileUnreadable: bomb.docx: could not read a Word document (DOCX): the DOCX unpacks to 250 MB",
        "fake.pdf": "fake.pdf is an image (image/png)",  # sniffed: a PNG named .pdf is the image it is
    }
    for name, message in expected.items():
        outcome, text, _ = await read({"name": name}, ctx)
        assert outcome is Outcome.ERROR and message in text, (name, text)


async def test_a_long_whole_file_says_how_to_read_parts() -> None:
    ctx = files_ctx(File.of("big.txt", ("word " * 3000).encode()))
    _, text, _ = await read({"name": "big.txt"}, ctx)
    assert "long: read the parts you need with range (lines) or pages" in text.splitlines()[0]


def test_read_file_is_a_builtin_offered_only_to_runs_with_files() -> None:
    enabled = ToolPolicy().enabled(builtin_registry(ToolSettings(_env_file=None)))
    assert "read_file" in enabled.names()  # listed by /agent-limits tools
    assert enabled.get("read_file").reads_private_data  # type: ignore[union-attr]
    assert "read_file" not in run_registry(enabled, task="t", environment="slack").names()
    assert "read_file" in run_registry(enabled, task="t", environment="terminal", has_files=True).names()


def test_extracted_joins_pages() -> None:
    assert Extracted.of(["a", "b"]) == Extracted("a\n\nb", ("a", "b"), False)


async def test_a_password_protected_pdf_says_so_and_an_owner_only_one_is_read() -> None:
    from pypdf import PdfReader, PdfWriter

    def encrypted(user_password: str) -> bytes:
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(["classified figures"]))))
        writer.encrypt(user_password, owner_password="owner", algorithm="AES-128")
        out = io.BytesIO()
        writer.write(out)
        return out.getvalue()

    with pytest.raises(FileUnreadable, match="the PDF is encrypted with a password"):
        await extract(encrypted("secret"), PDF, timeout=20, max_chars=1000)
    assert (await extract(encrypted(""), PDF, timeout=20, max_chars=1000)).text == "classified figures"
