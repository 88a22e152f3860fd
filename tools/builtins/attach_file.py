"""attach_file: hand a CSV, JSON, Markdown or text file over to the asker, through the ``Outbox`` port."""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field

from tools.context import ToolContext
from tools.errors import NotInSlackError
from tools.outbox import OutgoingFile
from tools.registry import tool

#: Characters of one file's content: a table or report, not a data dump (the model writes every character).
MAX_CONTENT_CHARS = 200_000
MAX_NAME_CHARS = 80
#: Extensions the tool hands over, with the MIME type Slack is told.
KINDS = {"csv": "text/csv", "json": "application/json", "md": "text/markdown", "txt": "text/plain"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]*$")


class AttachFileArgs(BaseModel):
    """Arguments of the attach_file tool."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="File name with its extension: .csv, .json, .md or .txt (e.g. report.csv).")
    content: str = Field(description="The whole file's text.")
    title: str = Field("", description="A short title shown above the file (default: its name).")


def checked(args: AttachFileArgs) -> OutgoingFile:
    """The file to hand over; ValueError telling the model what to fix."""
    name = args.name.strip()
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    if ext not in KINDS:
        raise ValueError(f"name must end in one of: {', '.join('.' + k for k in KINDS)} (got {name!r})")
    if len(name) > MAX_NAME_CHARS or not _NAME.fullmatch(name):
        raise ValueError(f"name must be at most {MAX_NAME_CHARS} letters, digits, spaces, '.', '_' or '-'")
    if not args.content.strip():
        raise ValueError("content is empty: nothing to attach")
    if len(args.content) > MAX_CONTENT_CHARS:
        raise ValueError(f"content is {len(args.content):,} characters; at most {MAX_CONTENT_CHARS:,} may be attached")
    if ext == "json":
        try:
            json.loads(args.content)
        except ValueError as exc:
            raise ValueError(f"content is not valid JSON ({exc})") from None
    return OutgoingFile(name, args.content, KINDS[ext], args.title.strip()[:MAX_NAME_CHARS * 2])


@tool(name="attach_file", timeout=15.0, shown_in_thread=True)
async def attach_file(args: AttachFileArgs, ctx: ToolContext) -> str:
    """Attach a file (CSV, JSON, Markdown or text) to your reply, for a table or report too long for a message.

    The file is uploaded into the conversation's thread when this step ends; say in your answer that it is
    attached rather than repeating its content.
    """
    if ctx.outbox is None:
        raise NotInSlackError("attach_file is only available inside Slack (there is no thread to attach to)")
    file = checked(args)
    if ctx.for_thread is not None:  # an armed run: links it may not reach are shown as text, as in the answer
        file = OutgoingFile(file.name, ctx.for_thread(file.content), file.mimetype, file.title)
    return await ctx.outbox.attach(file)
