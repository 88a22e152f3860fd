"""The current-figures table of BENCHMARKS.md: one row per headline figure, written between two marker comments.

Pure text handling (no benchmark imports), so a test can check it on a sample document without running anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BEGIN = "<!-- current:begin -->"
END = "<!-- current:end -->"
COLUMNS = ("figure", "value", "spread", "command", "date", "machine load")


@dataclass(frozen=True)
class Row:
    figure: str
    value: str
    spread: str
    command: str
    date: str
    load: str

    def cells(self) -> tuple[str, ...]:
        return (self.figure, self.value, self.spread, f"`{self.command}`", self.date, self.load)


def render(rows: Sequence[Row], preface: str = "") -> str:
    """The table in Markdown, after an optional preface paragraph; ``|`` in a cell is escaped."""
    lines = [preface, ""] if preface else []
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    lines.extend("| " + " | ".join(c.replace("|", "\\|") for c in row.cells()) + " |" for row in rows)
    return "\n".join(lines)


def replace_current(document: str, table: str) -> str:
    """``document`` with the text between the markers replaced by ``table``; everything else byte for byte."""
    start = document.find(BEGIN)
    end = document.find(END)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"the document needs {BEGIN} and then {END}")
    if document.find(BEGIN, start + 1) >= 0 or document.find(END, end + 1) >= 0:
        raise ValueError("each marker must appear once")
    head = document[: start + len(BEGIN)]
    return f"{head}\n{table}\n{document[end:]}"
