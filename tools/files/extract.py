"""``extract``: a file's text, read off the event loop, hostile files ending in ``FileUnreadable``.

Text files are decoded in a worker thread (decoding is linear in the size; nothing in the bytes can make it
loop). PDFs and DOCX are parsed in a child process started for the one file (``tools.files.readers``) with a
time limit, a memory cap and a CPU limit: a PDF that makes the parser loop, a zip bomb, a file that wants
gigabytes, all end there with a message for the user, and the worker never blocks or runs out of memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from dataclasses import dataclass
from typing import Any

from tools.errors import FileUnreadable
from tools.files import readers
from tools.files.sniff import kind_of, sniff

#: The child's address-space cap: the interpreter and a parser take about 100 MB, a large PDF some more.
DEFAULT_MAX_MEMORY = 1024 * 1024 * 1024
#: Plain names for the types, in messages.
_LABELS = {"pdf": "a PDF", "docx": "a Word document (DOCX)", "text": "text", "image": "an image", "audio": "audio"}


@dataclass(frozen=True, slots=True)
class Extracted:
    """A file's text: ``pages`` for a PDF (one entry per page), else one page; ``text`` is them joined."""

    text: str
    pages: tuple[str, ...]
    #: The text stopped at ``max_chars``: there is more in the file.
    truncated: bool = False

    @classmethod
    def of(cls, pages: list[str] | tuple[str, ...], *, truncated: bool = False) -> Extracted:
        return cls("\n\n".join(pages), tuple(pages), truncated)


async def extract(
    data: bytes, mimetype: str, *, timeout: float, max_chars: int, max_memory: int = DEFAULT_MAX_MEMORY
) -> Extracted:
    """The text of a text file, PDF or DOCX (at most ``max_chars`` characters); ``FileUnreadable`` with a
    message for the user for any other type, a file that is not what ``mimetype`` says, or one that cannot be
    read within ``timeout`` seconds and ``max_memory`` bytes."""
    kind = kind_of(mimetype)
    if kind == "text":
        text = await asyncio.to_thread(readers.decode_text, data)
        return Extracted.of([text[:max_chars]], truncated=len(text) > max_chars)
    if kind not in ("pdf", "docx"):
        raise FileUnreadable(f"{_LABELS.get(kind, f'a {mimetype} file')} cannot be read as text")
    actual = kind_of(sniff(data))
    if actual != kind:
        found = _LABELS.get(actual, "something else")
        raise FileUnreadable(f"the file is not {_LABELS[kind]}: its content is {found}")
    answer = await _in_child(data, kind, timeout=timeout, max_chars=max_chars, max_memory=max_memory)
    if "error" in answer:
        raise FileUnreadable(f"could not read {_LABELS[kind]}: {answer['error']}")
    return Extracted.of([str(page) for page in answer["pages"]], truncated=bool(answer["truncated"]))


async def _in_child(data: bytes, kind: str, *, timeout: float, max_chars: int, max_memory: int) -> dict[str, Any]:
    try:
        process = await _start_reader(kind, max_chars=max_chars, max_memory=max_memory, timeout=timeout)
    except OSError as exc:  # out of processes or memory: this file cannot be read now, the run goes on
        raise FileUnreadable(f"the reader could not start ({exc})") from exc
    try:
        out, _ = await asyncio.wait_for(process.communicate(data), timeout)
    except TimeoutError:
        stalled = f"reading it took longer than {timeout:g} s (the file may be built to stall readers)"
        raise FileUnreadable(stalled) from None
    finally:
        if process.returncode is None:  # timed out or cancelled: the child must not outlive the call
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await asyncio.shield(process.wait())
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and ("error" in answer or "pages" in answer):
        return answer
    # Killed by a limit (the CPU limit's SIGXCPU, the kernel on memory) or crashed in the parser's C code.
    raise FileUnreadable(
        f"the reader stopped (exit status {process.returncode}) before it finished: the file may be damaged "
        "or built to exhaust readers"
    )


async def _start_reader(kind: str, *, max_chars: int, max_memory: int, timeout: float) -> asyncio.subprocess.Process:
    # -P: the script's folder is not put on sys.path, so its neighbours cannot shadow standard modules.
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        readers.__file__,
        kind,
        str(max_chars),
        str(max_memory),
        str(math.ceil(timeout) + 1),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
