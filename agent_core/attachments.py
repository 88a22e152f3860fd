"""Attachment: a file given to a run, and the rules of the task message that carries the run's files.

The caller (Slack's file download, the terminal's ``--file``) hands the engine checked bytes; how they reach
the model is ``agent_core.files_in``'s. The thread's stored history keeps the task's text and a line per file,
never an image's bytes: an image is sent with the run it was given in only (``[image: name]`` stays in its place).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The heading of the files' listing, after the task's own text in its user message.
FILES_HEADER = "## Attached files"


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file given to a run: downloaded bytes already checked against the size caps."""

    name: str            # the file's name as shown in Slack ("report.pdf"); unique within one run (F2 dedupes)
    mimetype: str        # sniffed from the bytes by tools.files.sniff (never only the name / Slack's claim)
    data: bytes
    file_id: str = ""    # Slack's file id (F for Slack files, "" for terminal --file)
    note: str = ""       # why it could not be used, when it cannot ("" when fine); shown to the model and user
    external: bool = False  # from another organisation or workspace (Slack Connect, Grid): untrusted input


#: Model names (after any ``provider/`` prefix, lower case) that accept image parts, when ``OPENAI_VISION`` is
#: unset. The small reasoning models (o1-mini, o3-mini) and GPT-3.5/plain GPT-4 take text only.
_VISION_PREFIXES = (
    "gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-4-turbo", "gpt-4-vision", "gpt-5", "o1", "o3", "o4",
    "claude-", "gemini-", "gemma-3", "pixtral", "llava", "qwen-vl", "qwen2-vl", "qwen2.5-vl", "llama-4",
)
_TEXT_ONLY = ("o1-mini", "o1-preview", "o3-mini")


def vision_default(model: str) -> bool:
    """Whether ``model`` takes images, by its name (``OPENAI_VISION`` overrides it): OpenAI's GPT-4o, 4.1, 4.5
    and 5 families and o1/o3/o4 (not o1-mini, o1-preview, o3-mini), Claude, Gemini, and open vision models
    (names with ``vision`` or ``-vl``, Pixtral, LLaVA, Gemma 3, Llama 4)."""
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith(_TEXT_ONLY):
        return False
    return name.startswith(_VISION_PREFIXES) or "vision" in name or "-vl" in name


def message_text(content: Any) -> str:
    """A message's text: its string content, or its text parts joined (image parts left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def is_task_message(message: Any, task: str) -> bool:
    """Whether ``message`` is the user message of a run asked ``task``: the task alone, or followed by its files."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    text = message_text(message.get("content"))
    return text == task or text.startswith(f"{task}\n\n{FILES_HEADER}")


def format_bytes(size: int) -> str:
    """Bytes for people and models alike: ``20 MB``, ``1.5 GB``, ``300 bytes`` (units of 1,024)."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"
