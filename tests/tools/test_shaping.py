"""Result shaping: under the cap, head kept, the relevant passage from the middle kept, markers, order."""

from __future__ import annotations

import random
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.shaping import omitted_marker, shape

FILLER_WORDS = "alpha beta gamma delta epsilon zeta theta iota kappa lambda omicron sigma".split()
PLANTED = "The launch code for project Bluebird is 7741-ZX and it expires on Friday."


def filler(n_chars: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    sentences = []
    size = 0
    while size < n_chars:
        sentence = " ".join(rng.choice(FILLER_WORDS) for _ in range(12)).capitalize() + "."
        sentences.append(sentence)
        size += len(sentence) + 1
        if len(sentences) % 6 == 0:
            sentences.append("\n\n")
    return " ".join(sentences)


def test_short_text_is_unchanged() -> None:
    assert shape("hello", 100, "anything") == "hello"


def test_planted_sentence_in_the_middle_of_50k_characters_is_kept() -> None:
    text = filler(25_000, seed=1) + " " + PLANTED + " " + filler(25_000, seed=2)
    assert len(text) > 50_000
    out = shape(text, 4000, query="What is the launch code for Bluebird?")
    assert len(out) <= 4000
    assert PLANTED in out
    assert out.startswith(text[:500])  # the head is kept
    assert "characters omitted …]" in out


def test_the_thought_steers_the_choice_too() -> None:
    text = filler(20_000, seed=3) + " " + PLANTED + " " + filler(20_000, seed=4)
    out = shape(text, 2000, query="summarise the page\nI should look for the launch code of Bluebird")
    assert PLANTED in out


def test_markers_count_the_omitted_characters() -> None:
    text = filler(30_000, seed=5) + " " + PLANTED + " " + filler(30_000, seed=6)
    out = shape(text, 3000, query="Bluebird launch code")
    omitted = sum(int(m.replace(",", "")) for m in re.findall(r"\[… ([\d,]+) characters omitted …\]", out))
    kept = len(out) - sum(
        len(omitted_marker(0)) - 1 + len(f"{int(m.replace(',', '')):,}")
        for m in re.findall(r"\[… ([\d,]+) characters omitted …\]", out)
    )
    assert omitted + kept == len(text)


def test_kept_passages_stay_in_original_order() -> None:
    first = "Bluebird first fact: the budget is 40 thousand."
    second = "Bluebird second fact: the deadline is in May."
    text = filler(10_000, 7) + " " + first + " " + filler(10_000, 8) + " " + second + " " + filler(10_000, 9)
    out = shape(text, 2500, query="Bluebird budget deadline facts")
    assert first in out and second in out
    assert out.index(first) < out.index(second)


def test_without_relevant_terms_the_end_is_kept() -> None:
    text = filler(20_000, 10) + " THE END OF THE DOCUMENT."
    out = shape(text, 2000, query="")
    assert len(out) <= 2000
    assert out.rstrip().endswith("THE END OF THE DOCUMENT.")


def test_text_without_any_break_is_still_cut_to_the_cap() -> None:
    text = "x" * 100_000
    out = shape(text, 1000, query="x")
    assert len(out) <= 1000 and out.startswith("x" * 100)


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab cd\n.!"), min_size=0, max_size=5000),
    cap=st.integers(min_value=1, max_value=3000),
    query=st.text(alphabet=st.sampled_from("ab cd"), max_size=20),
)
def test_output_never_exceeds_the_cap(text: str, cap: int, query: str) -> None:
    out = shape(text, cap, query)
    assert len(out) <= cap
    if len(text) <= cap:
        assert out == text
