"""The port through which a tool hands a file over to the person who asked (``attach_file``).

Tools cannot talk to Slack: the caller (the Slack app) implements ``Outbox`` and passes it in
``ToolContext.outbox``; the files are uploaded into the asker's own thread when the step or the run ends.
The asker's thread is where the answer goes too, so a file handed over there is no exfiltration; once the
guard is armed its links are shown as text like the answer's (``ToolContext.for_thread``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """A file for the asker: its name (with its extension), its text and MIME type."""

    name: str
    content: str
    mimetype: str
    #: Shown above the file in Slack ("" : its name).
    title: str = ""


class Outbox(Protocol):
    """Takes files to hand over; implemented by the Slack app (uploads them into the run's thread)."""

    async def attach(self, file: OutgoingFile) -> str:
        """Queue ``file``; what the model is told (e.g. "report.csv will be attached to the thread").
        Raises ``ValueError`` with a message for the model when it cannot be taken (too many files)."""
        ...
