"""Reasoning written inside the answer: ``<think>…</think>`` from R1-style models on servers without a reasoning
parser. It is the model's reasoning, never its answer: split off before anything is shown or stored.

Some chat templates put the opening tag in the prompt, so the reply holds only ``…</think>answer``: all the text
before a closing tag without an opening one is reasoning too. An opening tag never closed (the reply was cut off
mid-thought) makes the rest of the reply reasoning.
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def split_think(content: str) -> tuple[str, str | None]:
    """``(answer, reasoning)`` of a reply's content; ``reasoning`` is None when it holds no think block."""
    if "think>" not in content:  # the common case: one scan, nothing to split
        return content, None
    start = content.find(OPEN)
    end = content.find(CLOSE)
    if end < 0:
        if start < 0:
            return content, None
        return content[:start].strip(), content[start + len(OPEN) :].strip()
    opened = 0 <= start < end
    before = content[:start] if opened else ""
    reasoning = content[start + len(OPEN) if opened else 0 : end]
    answer, more = split_think(before + content[end + len(CLOSE) :])  # a second block, should there be one
    return answer.strip(), "\n\n".join(r for r in (reasoning.strip(), more) if r)


class ThinkFilter:
    """The same split for streamed text: pieces of content in, ``(reasoning, answer)`` text out.

    The pieces come from ``deltas.StreamRedactor``, which cuts only at whitespace, so a tag (no whitespace in
    it) always arrives whole. ``withdrawn`` turns True when a closing tag without an opening one shows that the
    answer text let out before it was reasoning: the caller takes that text back.
    """

    def __init__(self) -> None:
        self._inside = False
        self._seen_answer = False
        self.withdrawn = False

    def feed(self, text: str) -> tuple[str, str]:
        if "think>" not in text:  # the common case
            if self._inside:
                return text, ""
            self._seen_answer = self._seen_answer or bool(text.strip())
            return "", text
        thought: list[str] = []
        answer: list[str] = []
        while text:
            if self._inside:
                head, tag, text = text.partition(CLOSE)
                thought.append(head)
                self._inside = not tag
                continue
            start, end = text.find(OPEN), text.find(CLOSE)
            if 0 <= end and (start < 0 or end < start):  # a closing tag first: the text so far was reasoning
                thought.append("".join(answer) + text[:end])
                answer.clear()
                self.withdrawn = self.withdrawn or self._seen_answer
                text = text[end + len(CLOSE) :]
                continue
            head, tag, text = text.partition(OPEN)
            answer.append(head)
            self._seen_answer = self._seen_answer or bool(head.strip())
            self._inside = bool(tag)
        return "".join(thought), "".join(answer)
