"""The reader processes (issue 37, items 8, 9 and 20): how many run at once, zip parts counted as they inflate,
spreadsheets read, scanned pages named, images decoded under the reader's memory cap, and ISO media told apart
by their brands. Every file is real, made in the test (``tests.tools.file_samples``)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator

import pytest
from PIL import Image

from tests.tools.file_samples import (
    big_png,
    docx_bytes,
    iso_media,
    lying_docx_bomb,
    pdf_bytes,
    picture_pdf,
    xlsx_bytes,
)
from tests.tools.test_files import File, files_ctx, read, reader_children
from tools import Outcome, ToolSettings, limit_readers
from tools.files import FileUnreadable, extract, prepare_image, sniff
from tools.files.child import DEFAULT_FILE_READERS

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


@pytest.fixture
def one_reader() -> Iterator[None]:
    limit_readers(1)
    yield
    limit_readers(DEFAULT_FILE_READERS)


# --- how many readers run at once ----------------------------------------------------------------------------


async def test_files_read_at_once_wait_their_turn_for_a_reader(one_reader: None) -> None:
    # Four people's files at once: one reader process at a time, and every file is read.
    reports = [docx_bytes([f"Report {n}"]) for n in range(4)]
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, len(reader_children()))
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        read = await asyncio.gather(*(extract(data, DOCX, timeout=20, max_chars=1000) for data in reports))
    finally:
        watcher.cancel()
    assert [r.text for r in read] == [f"Report {n}" for n in range(4)]
    assert most == 1


async def test_a_file_stopped_while_it_waits_leaves_the_queue(one_reader: None) -> None:
    first = asyncio.create_task(extract(pdf_bytes(["first"]), PDF, timeout=20, max_chars=100))
    waiting = asyncio.create_task(extract(pdf_bytes(["second"]), PDF, timeout=20, max_chars=100))
    await asyncio.sleep(0)
    waiting.cancel()  # the run was stopped
    third = await extract(pdf_bytes(["third"]), PDF, timeout=20, max_chars=100)
    assert (await first).text == "first" and third.text == "third"
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not reader_children()


def test_the_reader_limit_is_a_setting_sized_for_two_cores() -> None:
    assert ToolSettings(_env_file=None).agent_file_readers == DEFAULT_FILE_READERS == 1
    assert ToolSettings(_env_file=None, agent_file_readers=3).agent_file_readers == 3
    with pytest.raises(ValueError, match="at least 1"):
        limit_readers(0)


# --- zip parts counted as they inflate -----------------------------------------------------------------------


async def test_a_docx_part_that_inflates_past_what_it_declares_is_refused_as_it_inflates() -> None:
    bomb = lying_docx_bomb(300, declared=1024)  # declares 1 KB, inflates to 300 MB
    assert len(bomb) < 1_000_000 and sniff(bomb, "cv.docx") == DOCX
    # 150 MB of address space for the reader: inflating the part whole would not fit, counting it in steps does.
    with pytest.raises(FileUnreadable, match=r"'word/document.xml'\) inflates to more than the 1,024 bytes it "
                                             r"declares \(a zip bomb\?\)"):
        await extract(bomb, DOCX, timeout=20, max_chars=10_000, max_memory=150 * 1024 * 1024)


# --- spreadsheets --------------------------------------------------------------------------------------------


async def test_a_spreadsheet_is_read_as_csv_within_its_caps() -> None:
    data = xlsx_bytes({"Wide": [[f"c{n}" for n in range(250)], ["a", "b, with comma", 3]]})
    read = await extract(data, XLSX, timeout=20, max_chars=100_000)
    lines = read.text.splitlines()
    assert lines[0] == "## Sheet: Wide" and lines[1].split(",")[:2] == ["c0", "c1"]
    assert len(lines[1].split(",")) == 200 and read.truncated  # 200 columns kept of 250
    assert lines[2] == 'a,"b, with comma",3'
    short = await extract(xlsx_bytes({"Long": [[n, n * 2] for n in range(5000)]}), XLSX, timeout=20, max_chars=500)
    assert short.truncated and len(short.text) <= 500 and short.text.startswith("## Sheet: Long\n0,0\n1,2\n")


async def test_read_file_reads_a_spreadsheet_and_says_what_it_cannot_read() -> None:
    ctx = files_ctx(File.of("q3.xlsx", xlsx_bytes({"Sales": [["region", "total"], ["North", 1200]]})),
                    File.of("clip.mp4", iso_media(b"isom", (b"mp42",), (b"vide", b"soun"))))
    outcome, text, executor = await read({"name": "q3.xlsx"}, ctx)
    assert outcome is Outcome.OK and text.endswith(":\n\n## Sheet: Sales\nregion,total\nNorth,1200")
    assert executor.guard.armed(ctx.egress)
    outcome, text, _ = await read({"name": "clip.mp4"}, ctx)
    assert outcome is Outcome.ERROR and "clip.mp4 is video (video/mp4): read_file reads only text, PDF" in text


async def test_a_zip_that_is_neither_word_nor_excel_is_not_read() -> None:
    out = io.BytesIO()
    import zipfile

    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("ppt/presentation.xml", "<p/>")
    assert sniff(out.getvalue(), "deck.pptx") == "application/zip"


# --- scanned PDFs --------------------------------------------------------------------------------------------


async def test_pages_that_are_pictures_are_named() -> None:
    scan = await extract(picture_pdf(3), PDF, timeout=20, max_chars=10_000)
    assert scan.pictures == (1, 2, 3) and scan.pictures_label() == "all 3 pages"
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for part in (pdf_bytes(["A page of plain text, long enough to be read."]), picture_pdf(1)):
        writer.append(PdfReader(io.BytesIO(part)))
    mixed = io.BytesIO()
    writer.write(mixed)
    read = await extract(mixed.getvalue(), PDF, timeout=20, max_chars=10_000)
    assert read.pictures == (2,) and read.pictures_label() == "page 2"
    ctx = files_ctx(File.of("mixed.pdf", mixed.getvalue()))
    _, text, _ = await read_tool({"name": "mixed.pdf"}, ctx)
    assert "page 2: pictures with no text layer (a scan?), what they show cannot be read" in text.splitlines()[0]


read_tool = read


# --- images under the reader's memory cap --------------------------------------------------------------------


async def test_a_huge_image_is_decoded_in_the_reader_under_its_memory_cap() -> None:
    data = big_png(7000, 7000)  # 49 M pixels in 160 KB
    image = await prepare_image(data, "image/png", max_side=1568)
    assert (image.width, image.height, image.source_width, image.source_height) == (1568, 1568, 7000, 7000)
    # Its decoding needs 147 MB and more: under a 100 MB cap it ends in a message, not in the caller's memory.
    with pytest.raises(FileUnreadable, match="reading it needs more than the 100 MB memory limit"):
        await prepare_image(data, "image/png", max_side=1568, max_memory=100 * 1024 * 1024)


async def test_an_image_type_that_cannot_be_shown_is_named() -> None:
    with pytest.raises(FileUnreadable, match=r"HEIC images cannot be shown here \(PNG, JPEG, GIF, WebP and AVIF"):
        await prepare_image(iso_media(b"heic", (b"mif1",)), "image/heic", max_side=100)
    tiff = io.BytesIO()
    Image.new("RGB", (10, 10)).save(tiff, "TIFF")
    with pytest.raises(FileUnreadable, match="cannot be decoded"):  # only the formats that are shown are parsed
        await prepare_image(tiff.getvalue(), "image/png", max_side=100)


# --- ISO media ----------------------------------------------------------------------------------------------


def test_iso_media_is_told_apart_by_its_brands_and_tracks() -> None:
    avif = io.BytesIO()
    Image.new("RGB", (16, 16)).save(avif, "AVIF")
    cases = {
        avif.getvalue(): "image/avif",  # written by Pillow: avif, mif1, miaf
        iso_media(b"avis", (b"avis", b"msf1")): "image/avif",
        iso_media(b"heic", (b"mif1", b"heic")): "image/heic",
        iso_media(b"mif1", (b"mif1", b"heix")): "image/heic",
        iso_media(b"qt  ", (b"qt  ",), (b"vide", b"soun")): "video/quicktime",
        iso_media(b"isom", (b"isom", b"iso2", b"avc1", b"mp41"), (b"vide", b"soun")): "video/mp4",
        iso_media(b"mp42", (b"mp42", b"isom"), (b"vide",)): "video/mp4",
        iso_media(b"M4A ", (b"M4A ", b"mp42", b"isom"), (b"soun",)): "audio/mp4",
        iso_media(b"isom", (b"isom", b"mp42"), (b"soun",)): "audio/mp4",  # a voice clip under a generic brand
        b"\0\0\0\x20ftypM4A ": "audio/mp4",
    }
    for data, expected in cases.items():
        assert sniff(data, "file") == expected, data[:40]
