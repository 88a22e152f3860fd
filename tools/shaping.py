"""Cut an oversized observation to its budget: the head, then the passages most relevant to the task.

Head-and-tail cuts lose the answer in the middle of a long page, the most reported context failure
in agent loops. So the text after the head is split into passages (paragraphs, long ones into
sentences), scored with BM25 against the terms of the task and the current thought, and the best
are kept in their original order, with a marker wherever text was left out::

    <head>
    [… 12,345 characters omitted …]
    <relevant passage>
    [… 30,001 characters omitted …]
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

#: Share of the budget given to the start of the text, which usually says what the text is.
HEAD_SHARE = 0.25
#: A paragraph longer than this is split into sentences, and a sentence into windows of this size.
MAX_PASSAGE_CHARS = 600
#: BM25 parameters (the usual Robertson defaults).
BM25_K1 = 1.5
BM25_B = 0.75

_WORD = re.compile(r"\w+", re.UNICODE)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n")
#: Words too common to say anything about relevance.
_STOPWORDS = frozenset(
    "a an and are as at be by for from has have how i in is it its of on or that the this to was what "
    "when where which who why will with you your me my we our please can could would should do does did "
    "tell find give get show about into than then there their them they these those not no yes".split()
)


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int


def omitted_marker(count: int) -> str:
    """The marker put where ``count`` characters were left out."""
    return f"\n[… {count:,} characters omitted …]\n"


def shape(text: str, max_chars: int, query: str = "") -> str:
    """``text`` if it fits in ``max_chars``; otherwise head + relevant passages + markers, within it."""
    if len(text) <= max_chars:
        return text
    if max_chars < 80:  # too small for markers to be worth their length
        return text[:max_chars]
    head_end = _boundary_before(text, int(max_chars * HEAD_SHARE))
    passages = _passages(text, head_end)
    terms = _terms(query)
    scores = _bm25(text, passages, terms) if terms else [0.0] * len(passages)

    chosen: list[_Span] = []
    ranked = sorted((i for i in range(len(passages)) if scores[i] > 0), key=lambda i: (-scores[i], i))
    for i in ranked:
        trial = sorted([*chosen, passages[i]], key=lambda s: s.start)
        if _length(text, head_end, trial) <= max_chars:
            chosen = trial
    # Whatever the relevant passages leave is spent on the end of the text, where conclusions sit.
    for span in reversed(passages):
        if span in chosen:
            continue
        trial = sorted([*chosen, span], key=lambda s: s.start)
        if _length(text, head_end, trial) > max_chars:
            break  # walking back from the end: once one does not fit, earlier ones would leave gaps
        chosen = trial
    out = _assemble(text, head_end, chosen)
    return out if len(out) <= max_chars else text[: max_chars - 1] + "…"


def _length(text: str, head_end: int, spans: list[_Span]) -> int:
    """``len(_assemble(...))`` without building the string."""
    total, pos = head_end, head_end
    for span in spans:
        if span.start > pos:
            total += len(omitted_marker(span.start - pos))
        total += span.end - span.start
        pos = span.end
    if pos < len(text):
        total += len(omitted_marker(len(text) - pos))
    return total


def _assemble(text: str, head_end: int, spans: list[_Span]) -> str:
    parts = [text[:head_end]]
    pos = head_end
    for span in spans:
        if span.start > pos:
            parts.append(omitted_marker(span.start - pos))
        parts.append(text[span.start : span.end])
        pos = span.end
    if pos < len(text):
        parts.append(omitted_marker(len(text) - pos))
    return "".join(parts)


def _boundary_before(text: str, limit: int) -> int:
    """The end of the last whole line (or word) before ``limit``, so the head does not stop mid-word."""
    for sep in ("\n", " "):
        cut = text.rfind(sep, 0, limit)
        if cut > limit // 2:
            return cut + 1
    return limit


def _passages(text: str, start: int) -> list[_Span]:
    spans: list[_Span] = []
    for para in _split(text, start, len(text), _PARAGRAPH_BREAK):
        if para.end - para.start <= MAX_PASSAGE_CHARS:
            spans.append(para)
            continue
        for sentence in _split(text, para.start, para.end, _SENTENCE_END):
            for pos in range(sentence.start, sentence.end, MAX_PASSAGE_CHARS):
                spans.append(_Span(pos, min(pos + MAX_PASSAGE_CHARS, sentence.end)))
    return spans


def _split(text: str, start: int, end: int, sep: re.Pattern[str]) -> list[_Span]:
    """Spans of ``text[start:end]`` between separators; each span keeps its trailing separator."""
    spans: list[_Span] = []
    pos = start
    for match in sep.finditer(text, start, end):
        if match.end() > pos:
            spans.append(_Span(pos, match.end()))
        pos = match.end()
    if pos < end:
        spans.append(_Span(pos, end))
    return [s for s in spans if text[s.start : s.end].strip()]


def _terms(query: str) -> set[str]:
    return {w for w in (m.lower() for m in _WORD.findall(query)) if w not in _STOPWORDS and len(w) > 1}


def _bm25(text: str, passages: list[_Span], terms: set[str]) -> list[float]:
    docs = [Counter(w.lower() for w in _WORD.findall(text[p.start : p.end])) for p in passages]
    lengths = [sum(d.values()) for d in docs]
    avg = (sum(lengths) / len(lengths)) if lengths else 1.0
    n = len(docs)
    idf = {}
    for term in terms:
        df = sum(1 for d in docs if term in d)
        idf[term] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    scores = []
    for doc, length in zip(docs, lengths, strict=True):
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / (avg or 1.0))
        scores.append(sum(idf[t] * doc[t] * (BM25_K1 + 1) / (doc[t] + norm) for t in terms if t in doc))
    return scores
