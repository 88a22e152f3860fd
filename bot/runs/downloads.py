"""Downloads: one run's files fetched from Slack with its workspace's bot token, capped and checked.

Each file is fetched through its ``url_private_download`` with the workspace's bot token (``files:read``),
streamed and capped: by its declared size first, then by the bytes read (``AGENT_FILE_MAX_BYTES`` per file,
``AGENT_FILES_MAX_BYTES_PER_RUN`` for the run), within ``AGENT_FILE_DOWNLOAD_TIMEOUT_SECONDS``. Its type is
sniffed from the bytes (``tools.sniff``), never taken from the name. A file that cannot be used (too large,
gone, another workspace's, a login page in its place) becomes an attachment with a ``note`` and no bytes. The
token is only ever sent to Slack's own hosts (the Web API's host and its subdomains).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urljoin, urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Attachment, format_bytes
from bot.i18n import N_, _
from bot.identity import Workspace
from bot.runs.settings import RunsSettings
from bot.turn import FileRef
from tools import sniff

#: Redirects followed within Slack's hosts (a redirect elsewhere is refused: the token stays with Slack).
MAX_REDIRECTS = 3
_CHUNK = 64 * 1024
_UNKNOWN_TYPE = "application/octet-stream"


class FileProblem(Exception):
    """Why a file cannot be used: ``str()`` in English for the model (it tells the asker in its own words), and
    ``shown()`` in the current locale for the notice to the person who posted the file."""

    def __init__(self, text: str, **fields: object) -> None:
        super().__init__(text.format(**fields))
        self.text = text
        self.fields = fields

    def shown(self) -> str:
        return _(self.text).format(**self.fields)


@dataclass(frozen=True, slots=True)
class FileCaps:
    """``AGENT_FILE_MAX_BYTES``, ``AGENT_FILES_MAX_BYTES_PER_RUN``, ``AGENT_FILE_DOWNLOAD_TIMEOUT_SECONDS``."""

    max_bytes: int
    max_bytes_per_run: int
    timeout: float

    @classmethod
    def of(cls, settings: RunsSettings) -> FileCaps:
        return cls(settings.agent_file_max_bytes, settings.agent_files_max_bytes_per_run,
                   settings.agent_file_download_timeout_seconds)


class FileFetcher:
    """Downloads one run's files with its workspace's client, within the caps."""

    def __init__(self, client: AsyncWebClient, ws: Workspace, caps: FileCaps, *, external: bool = True) -> None:
        self.client = client
        self.ws = ws
        #: ``/agent-limits external-files``: files from outside the workspace are read (as untrusted input).
        self.external = external
        #: Each unusable file's problem, by file id: the notice to its poster words it in their language.
        self.problems: dict[str, FileProblem] = {}
        self.caps = caps
        api = urlsplit(client.base_url)
        self._slack_host = (api.hostname or "").lower()
        self._api_scheme = api.scheme
        self._api_port = _port(api.scheme, api.port)

    async def fetch(self, refs: Sequence[FileRef]) -> tuple[Attachment, ...]:
        """One attachment per file, in order; a file that cannot be used carries a ``note`` and no bytes."""
        if not refs:
            return ()
        left = self.caps.max_bytes_per_run
        names: set[str] = set()
        out: list[Attachment] = []
        session = self.client.session
        own = session is None  # the client makes a session per call then; one for this run's files
        session = session or aiohttp.ClientSession()
        try:
            for ref in refs:
                try:
                    ref = await self._resolved(ref)  # a stub's name is known from here on
                    data = await self._download(session, ref, left)
                except FileProblem as problem:
                    self.problems[ref.id] = problem
                    out.append(Attachment(name=_unique(ref.name or ref.id, names), mimetype=ref.mimetype
                                          or _UNKNOWN_TYPE, data=b"", file_id=ref.id, note=str(problem)))
                    continue
                left -= len(data)
                out.append(Attachment(name=_unique(ref.name or ref.id, names), mimetype=sniff(data, ref.name),
                                      data=data, file_id=ref.id, external=self._outside(ref)))
        finally:
            if own:
                await session.close()
        return tuple(out)

    async def _resolved(self, ref: FileRef) -> FileRef:
        """A Slack Connect stub filled in by ``files.info``; a file of another workspace refused."""
        if ref.stub or not ref.url:
            try:
                info = await self.client.files_info(file=ref.id)
            except SlackApiError as exc:
                error = str(exc.response.get("error") or "error")
                if error in ("file_not_found", "file_deleted"):
                    raise FileProblem(N_("Slack says it no longer exists (`{error}`)"), error=error) from exc
                raise FileProblem(N_("Slack would not describe it (`{error}`)"), error=error) from exc
            except (SlackClientError, aiohttp.ClientError, TimeoutError) as exc:
                raise FileProblem(N_("Slack could not be asked about it ({error})"), error=type(exc).__name__) from exc
            full = FileRef.of_event(info.get("file"))
            if full is None:
                raise FileProblem(N_("Slack would not describe it"))
            ref = full
        if self._outside(ref) and not self.external:
            raise FileProblem(N_("it comes from outside this workspace, and its admins turned such files off "
                                 "(`/agent-limits external-files`)"))
        if not ref.url:
            raise FileProblem(N_("Slack gave no download address for it"))
        return ref

    async def _download(self, session: aiohttp.ClientSession, ref: FileRef, left: int) -> bytes:
        cap = min(self.caps.max_bytes, left)
        if ref.size > cap:
            raise self._too_large(ref.size)
        try:
            async with asyncio.timeout(self.caps.timeout):
                return await self._get(session, ref, cap)
        except TimeoutError as exc:
            raise FileProblem(N_("its download took longer than {seconds} s"),
                              seconds=f"{self.caps.timeout:g}") from exc
        except aiohttp.ClientError as exc:
            raise FileProblem(N_("its download failed ({error})"), error=type(exc).__name__) from exc

    async def _get(self, session: aiohttp.ClientSession, ref: FileRef, cap: int) -> bytes:
        url = ref.url
        for _attempt in range(MAX_REDIRECTS + 1):
            if not self._is_slack(url):
                raise FileProblem(N_("its download address is not Slack's"))
            headers = {"Authorization": f"Bearer {self.client.token}"}
            async with session.get(url, headers=headers, allow_redirects=False) as resp:
                if resp.status in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
                    url = urljoin(url, resp.headers["Location"])
                    continue
                return await self._body(resp, ref, cap)
        raise FileProblem(N_("Slack redirected its download too many times"))

    async def _body(self, resp: aiohttp.ClientResponse, ref: FileRef, cap: int) -> bytes:
        """A final answer's file: refused unless Slack sent it (200, not a login page) within ``cap``."""
        if resp.status == 404:
            raise FileProblem(N_("Slack says it no longer exists (404)"))
        if resp.status != 200:
            raise FileProblem(N_("Slack answered HTTP {status} for it"), status=resp.status)
        if _is_page(resp.content_type, ref.mimetype):
            raise FileProblem(_LOGIN_PAGE)
        if (resp.content_length or 0) > cap:
            raise self._too_large(resp.content_length or 0)
        data = bytearray()
        async for chunk in resp.content.iter_chunked(_CHUNK):
            data += chunk
            if len(data) > cap:
                raise self._too_large(cap + 1, more=True)
        if _is_page(_html_start(bytes(data[:512])), ref.mimetype):
            raise FileProblem(_LOGIN_PAGE)
        return bytes(data)

    def _outside(self, ref: FileRef) -> bool:
        """From another organisation (Slack Connect) or another workspace of the org: Slack serves it to this
        workspace's token when it was shared here, and the run reads it as untrusted input."""
        return bool(ref.team) and self.ws.team_id != "-" and ref.team != self.ws.team_id

    def _is_slack(self, url: str) -> bool:
        """The token goes only where Slack's API is: its scheme, its host (or a subdomain) and its port; a
        redirect keeping the host but changing the port is another server."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        try:
            port = _port(parts.scheme, parts.port)
        except ValueError:
            return False  # a port that is no number
        if parts.scheme != self._api_scheme or port != self._api_port or not self._slack_host:
            return False
        return host == self._slack_host or host.endswith("." + self._slack_host)

    def _too_large(self, size: int, *, more: bool = False) -> FileProblem:
        """Over the cap per file, or over what the run's cap has left (the bytes read: ``more`` than shown)."""
        shown = format_bytes(size - 1 if more else size)
        if size > self.caps.max_bytes:
            text = (N_("it is more than {size}, over the {cap} limit per file") if more
                    else N_("it is {size}, over the {cap} limit per file"))
            return FileProblem(text, size=shown, cap=format_bytes(self.caps.max_bytes))
        text = (N_("it is more than {size}, more than what is left of the {cap} limit for all the files of one run")
                if more else N_("it is {size}, more than what is left of the {cap} limit for all the files of one run"))
        return FileProblem(text, size=shown, cap=format_bytes(self.caps.max_bytes_per_run))


_LOGIN_PAGE = N_(
    "Slack answered with a web page instead of the file (a login page: the app may lack the `files:read` scope; "
    "an admin can reinstall it)"
)


def _port(scheme: str, port: int | None) -> int | None:
    """The port a URL connects to: its own, else its scheme's."""
    return port if port is not None else {"https": 443, "http": 80}.get(scheme)


def _is_page(content_type: str, claimed: str) -> bool:
    """An HTML page where the file claimed another type: Slack's login page, not the file."""
    return content_type.split(";")[0].strip().lower() == "text/html" and claimed.lower() != "text/html"


def _html_start(head: bytes) -> str:
    """``text/html`` when the bytes open an HTML document."""
    start = head.lstrip().lower()
    return "text/html" if start.startswith((b"<!doctype html", b"<html")) else ""


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``stem (2).ext`` when the run has a file of that name already."""
    candidate, n = name, 1
    path = PurePosixPath(name)
    while candidate in taken:
        n += 1
        candidate = f"{path.stem} ({n}){path.suffix}"
    taken.add(candidate)
    return candidate
