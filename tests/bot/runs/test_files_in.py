"""Files in, through the running service: a file attached to a mention or a thread reply is downloaded with the
workspace's token and handed to the run; every file that cannot be used gets its note in the thread."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from agent_core import RunRequest
from bot.queue.worker import default_agent
from bot.runs.files import FILES_ONLY_TASK
from bot.serve.service import Service
from bot.settings import Settings
from tests.bot.conftest import BOT_TOKEN, App, make_settings
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.pages import PageServer
from tests.fakes.slack_api import FakeFile, FakeSlack, PostedMessage
from tests.signing import command_body, event_body, mention, message, next_ts


def _png(width: int = 4, height: int = 3) -> bytes:
    """A real PNG (grey pixels), decodable by any image library."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes([128] * width) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _pdf(text: str) -> bytes:
    """A one-page PDF drawing ``text`` in Helvetica: a PDF reader reads the text back."""
    stream = f"BT /F1 12 Tf 50 780 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


PNG = _png()
PDF = _pdf("Quarterly revenue grew by 12 percent")
#: Small caps, so the tests' files cross them without megabytes of traffic.
FILE_CAP, RUN_CAP = 4_000, 6_000


class Capture:
    """An agent factory that records each run's request, then runs the real engine."""

    def __init__(self) -> None:
        self.requests: list[RunRequest] = []

    def __call__(self, settings: Settings, store: Any, trace: Any) -> Any:
        agent, requests = default_agent(settings, store, trace), self.requests

        class Recording:
            registry = agent.registry

            def events(self, request: RunRequest) -> Any:
                requests.append(request)
                return agent.events(request)

            async def aclose(self) -> None:
                await agent.aclose()

        return Recording()

    def attachments(self, run: int = -1) -> list[Any]:
        return list(self.requests[run].attachments)


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    return make_settings(key_prefix, fake_slack, fake_openai, agent_file_max_bytes=FILE_CAP,
                         agent_files_max_bytes_per_run=RUN_CAP, agent_file_download_timeout_seconds=1)


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[App]:
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        yield App(service, http)


def with_files(event: dict[str, Any], *entries: dict[str, Any]) -> dict[str, Any]:
    return {**event, "files": list(entries)}


def notices(thread: list[PostedMessage]) -> str:
    return "\n".join(m.text + m.block_text() for m in thread if "can't use every file" in m.text + m.block_text())


async def test_a_mention_with_a_png_and_a_pdf_hands_both_to_the_run(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("A chart and a report."))
    png = fake_slack.add_file(FakeFile("F1", "chart.png", PNG, "image/png"))
    pdf = fake_slack.add_file(FakeFile("F2", "report.pdf", PDF, "application/pdf"))
    ts = next_ts()
    capture = Capture()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> what is this?", ts=ts), png, pdf)))
    await app.drain(agent_factory=capture)
    # Downloaded once each, with the workspace's bot token.
    assert fake_slack.downloads == [("F1", BOT_TOKEN), ("F2", BOT_TOKEN)]
    got = capture.attachments()
    assert [(a.name, a.mimetype, a.data, a.file_id, a.note) for a in got] == [
        ("chart.png", "image/png", PNG, "F1", ""), ("report.pdf", "application/pdf", PDF, "F2", ""),
    ]
    assert not notices(fake_slack.thread_messages("C1", ts))
    # The model gets the image as an image part of the task's message, and the PDF named in it.
    [task] = [m for m in fake_openai.requests[0].json["messages"] if isinstance(m["content"], list)]
    assert [p["type"] for p in task["content"]].count("image_url") == 1 and "report.pdf" in json.dumps(task)


async def test_a_mention_with_only_a_file_still_runs(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("It is a chart."))
    png = fake_slack.add_file(FakeFile("F1", "chart.png", PNG, "image/png"))
    ts = next_ts()
    capture = Capture()
    await app.post_event(event_body(with_files(mention(text="<@UBOT>", ts=ts), png)))
    await app.drain(agent_factory=capture)
    assert capture.requests[0].task == FILES_ONLY_TASK
    assert [a.name for a in capture.attachments()] == ["chart.png"]
    assert len(fake_openai.requests) == 1


async def test_a_file_shared_in_a_reply_and_then_a_follow_up_refer_to_earlier_files(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Hello."), text("Got the chart."), text("Still the chart."))
    ts = next_ts()
    capture = Capture()
    await app.post_event(event_body(mention(text="<@UBOT> hi", ts=ts)))
    await app.drain(agent_factory=capture)
    png = fake_slack.add_file(FakeFile("F1", "chart.png", PNG, "image/png"))
    # An upload in the thread: the message event of subtype file_share, with no text.
    await app.post_event(event_body(with_files(
        message(text="", thread_ts=ts, subtype="file_share", ts=next_ts()), png)))
    await app.drain(agent_factory=capture)
    await app.post_event(event_body(message(text="what was on the chart?", thread_ts=ts, ts=next_ts())))
    await app.drain(agent_factory=capture)
    assert [len(capture.attachments(i)) for i in range(3)] == [0, 1, 1]
    assert capture.requests[1].task == FILES_ONLY_TASK
    assert capture.attachments(2)[0].data == PNG  # the follow-up has the earlier file, downloaded again
    assert [d[0] for d in fake_slack.downloads] == ["F1", "F1"]


@pytest.mark.parametrize("shape", ["Slack Connect stub", "id only"])
async def test_a_file_the_event_only_names_is_described_with_files_info(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, shape: str
) -> None:
    fake_openai.queue(text("ok"))
    stub = fake_slack.add_file(FakeFile("F1", "notes.txt", b"meeting notes", "text/plain", stub=True))
    assert stub["file_access"] == "check_file_info" and "url_private_download" not in stub
    if shape == "id only":  # what an app_mention may carry: files: [{"id": ...}]
        stub = {"id": "F1"}
    capture = Capture()
    ts = next_ts()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> read it", ts=ts), stub)))
    await app.drain(agent_factory=capture)
    assert [c.params["file"] for c in fake_slack.calls_of("files.info")] == ["F1"]
    assert [(a.name, a.data, a.note) for a in capture.attachments()] == [("notes.txt", b"meeting notes", "")]


HOSTILE = [
    pytest.param(FakeFile("F1", "huge.bin", b"x", declared_size=1024**3), "it is 1 GB, over the 3.9 KB limit per file",
                 False, id="1 GB declared"),
    pytest.param(FakeFile("F1", "liar.bin", b"", declared_size=100, endless=True),
                 "it is more than 3.9 KB, over the 3.9 KB limit per file", True, id="more bytes than declared"),
    pytest.param(FakeFile("F1", "gone.pdf", PDF, "application/pdf", status=404),
                 "Slack says it no longer exists (404)", False, id="404"),
    pytest.param(FakeFile("F1", "gone.pdf", PDF, "application/pdf", stub=True, info_error="file_not_found"),
                 "Slack says it no longer exists (`file_not_found`)", False, id="file_not_found"),
    pytest.param(FakeFile("F1", "chart.png", PNG, "image/png", login_page=True),
                 "Slack answered with a web page instead of the file", True, id="HTML instead of the file"),
    pytest.param(FakeFile("F1", "slow.png", PNG, "image/png", delay=5),
                 "its download took longer than 1 s", True, id="too slow"),
]


@pytest.mark.parametrize(("file", "said", "downloaded"), HOSTILE)
async def test_a_file_that_cannot_be_used_gets_its_note_and_the_run_goes_on(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, file: FakeFile, said: str, downloaded: bool
) -> None:
    fake_openai.queue(text("I could not read it."))
    entry = fake_slack.add_file(file)
    ts = next_ts()
    capture = Capture()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> what is in it?", ts=ts), entry)))
    await app.drain(agent_factory=capture)
    told = notices(fake_slack.thread_messages("C1", ts))
    name = "F1" if file.stub else file.name  # a stub Slack will not describe is known by its id only
    assert f"*{name}*: {said}" in told, told
    [got] = capture.attachments()
    assert (got.name, got.data, got.file_id) == (name, b"", "F1") and said in got.note
    assert bool(fake_slack.downloads) == downloaded
    assert len(fake_openai.requests) == 1  # the run went on without the file


async def test_the_files_past_the_per_run_cap_get_a_note(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("ok"))
    first = fake_slack.add_file(FakeFile("F1", "a.txt", b"a" * 3_500, "text/plain"))
    second = fake_slack.add_file(FakeFile("F2", "b.txt", b"b" * 3_500, "text/plain"))
    ts = next_ts()
    capture = Capture()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> compare", ts=ts), first, second)))
    await app.drain(agent_factory=capture)
    a, b = capture.attachments()
    assert (a.data, a.note) == (b"a" * 3_500, "")
    assert b.data == b"" and "limit for all the files of one run" in b.note
    assert "b.txt" in notices(fake_slack.thread_messages("C1", ts))
    assert [d[0] for d in fake_slack.downloads] == ["F1"]  # refused by its declared size: never fetched


async def test_the_token_never_leaves_slacks_hosts(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("ok"))
    entry = fake_slack.add_file(FakeFile("F1", "x.png", PNG, "image/png"))
    entry["url_private_download"] = entry["url_private_download"].replace("127.0.0.1", "127.0.0.2")
    ts = next_ts()
    capture = Capture()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> look", ts=ts), entry)))
    await app.drain(agent_factory=capture)
    assert "its download address is not Slack's" in notices(fake_slack.thread_messages("C1", ts))
    assert not fake_slack.downloads


async def test_another_organisations_file_is_read_as_untrusted_unless_admins_turn_it_off(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UADMIN"] = {"is_admin": True}
    fake_openai.queue(text("Read it."), text("ok"))
    theirs = fake_slack.add_file(FakeFile("F1", "partner.txt", b"partner roadmap", "text/plain", team="TOTHER"))
    capture, ts = Capture(), next_ts()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> summarise", ts=ts), theirs)))
    await app.drain(agent_factory=capture)
    [got] = capture.attachments()
    assert (got.data, got.note, got.external) == (b"partner roadmap", "", True)  # Slack served it to our token
    told = json.dumps(fake_openai.requests[0].json["messages"])
    assert "shared from outside this workspace: untrusted" in told and "partner roadmap" in told
    assert not notices(fake_slack.thread_messages("C1", ts))

    said = await app.post_form(command_body(command="/agent-limits", text="external-files off", user="UADMIN"))
    assert "external-files: on → off" in json.loads(await said.text())["text"]
    later = fake_slack.add_file(FakeFile("F2", "partner2.txt", b"more", "text/plain", team="TOTHER"))
    ts = next_ts()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> and this?", ts=ts), later)))
    await app.drain(agent_factory=capture)
    assert "*partner2.txt*: it comes from outside this workspace, and its admins turned such files off" in notices(
        fake_slack.thread_messages("C1", ts))
    assert [d[0] for d in fake_slack.downloads] == ["F1"]


async def test_a_redirect_to_slacks_host_on_another_port_gets_no_token(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("ok"))
    async with PageServer() as elsewhere:  # the fake Slack's own host (127.0.0.1), another port
        entry = fake_slack.add_file(FakeFile("F1", "x.png", PNG, "image/png", redirect=elsewhere.url("/text")))
        ts = next_ts()
        await app.post_event(event_body(with_files(mention(text="<@UBOT> look", ts=ts), entry)))
        await app.drain()
    assert not [h for _, h in elsewhere.requests if "Authorization" in h]
    assert "its download address is not Slack's" in notices(fake_slack.thread_messages("C1", ts))


async def test_same_names_are_made_unique_and_a_malformed_files_list_is_refused(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("ok"))
    one = fake_slack.add_file(FakeFile("F1", "image.png", PNG, "image/png"))
    two = fake_slack.add_file(FakeFile("F2", "image.png", PNG, "image/png"))
    capture = Capture()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> diff", ts=next_ts()), one, two)))
    await app.drain(agent_factory=capture)
    assert [a.name for a in capture.attachments()] == ["image.png", "image (2).png"]
    refused = await app.post_event(event_body({**mention(text="<@UBOT> x", ts=next_ts()), "files": "F1"}))
    assert refused.status == 400


async def test_a_mention_under_a_message_with_a_file_gets_that_file(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("The report says..."), text("Page two says..."))
    pdf = fake_slack.add_file(FakeFile("F1", "q3.pdf", PDF, "application/pdf"))
    parent = next_ts()
    fake_slack.replies[("C1", parent)] = [
        {"type": "message", "user": "U2", "ts": parent, "text": "the Q3 report", "files": [pdf]},
    ]
    capture = Capture()
    await app.post_event(event_body(mention(text="<@UBOT> summarise it", thread_ts=parent, ts=next_ts())))
    await app.drain(agent_factory=capture)
    await app.post_event(event_body(message(text="and page two?", thread_ts=parent, ts=next_ts())))
    await app.drain(agent_factory=capture)
    assert [[a.name for a in capture.attachments(i)] for i in range(2)] == [["q3.pdf"], ["q3.pdf"]]
    scans = [c for c in fake_slack.calls_of("conversations.replies") if "latest" in c.params]
    assert len(scans) == 1  # read for files once, at the thread's first run


async def test_a_spanish_posters_file_notice_is_in_spanish_and_the_model_reads_it_in_english(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UES"] = {"locale": "es-ES"}
    fake_openai.queue(text("No pude leerlo."))
    entry = fake_slack.add_file(FakeFile("F1", "huge.bin", b"x", declared_size=1024**3))
    ts = next_ts()
    capture = Capture()
    await app.post_event(event_body(with_files(mention(text="<@UBOT> what is in it?", ts=ts, user="UES"), entry)))
    await app.drain(agent_factory=capture)
    told = "\n".join(m.block_text() for m in fake_slack.thread_messages("C1", ts))
    assert ":warning: No puedo usar todos los archivos" in told, told
    assert "*huge.bin*: ocupa 1 GB, por encima del límite de 3.9 KB por archivo" in told, told
    [got] = capture.attachments()
    assert got.note == "it is 1 GB, over the 3.9 KB limit per file"
