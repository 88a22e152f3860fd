"""count_lines: the progress note counted line by line gives the count of the whole text, for every encoding."""

from __future__ import annotations

import random

import pytest

from agent_core import price_for
from agent_core.limits import Limits
from agent_core.steps import progress
from agent_core.stopper import Stopper
from agent_core.store import Progress
from agent_core.tokens import ByteUpperBound, TiktokenCounter, count_lines, counter_for

#: Characters and runs that sit next to a newline in tricky ways: "/" and "\r" join it in o200k, spaces run on.
_ALPHABET = [*"ab AZ\n\n\n  \r\t/.:-#'s12é日\u00a0\u2028\u3000,;!?()\"$_~",
             "  - ", "\n  - ", "'ll", "\n\n", " \n", "\r\n"]


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4-0613"])
def test_counting_by_lines_is_the_whole_texts_count(model: str) -> None:
    counter = counter_for(model)
    if not isinstance(counter, TiktokenCounter):
        pytest.skip("no offline rank file")
    assert counter.splits_at_lines
    rnd = random.Random(7)
    texts = ["".join(rnd.choice(_ALPHABET) for _ in range(rnd.randint(1, 30))) for _ in range(5000)]
    findings = tuple(f'calculator({{"expression": "{i}*7"}}) → {i * 7}\n/ end' for i in range(8))
    state = Progress(task="  What is 6*7?\n/tmp and 'll\n", tools_used=("calculator",), findings=findings)
    texts.append(progress.note(state, Stopper(Limits(), price_for("gpt-4o-mini"))))
    for text in texts:
        assert count_lines(counter, text) == counter.count(text), repr(text)


def test_other_counters_count_the_text_whole() -> None:
    class Halves:
        exact = False

        def count(self, text: str) -> int:
            return len(text) // 2

    assert count_lines(Halves(), "a\nb\nc") == 2  # by lines it would be 0
    assert count_lines(ByteUpperBound(), "é\n- x\n") == len("é\n- x\n".encode())


def test_an_encoding_with_another_pre_tokenizer_is_not_cut() -> None:
    class Encoding:
        name, _pat_str = "r50k_like", r"\s+(?!\S)|\S+"

        def encode_ordinary(self, text: str) -> list[int]:
            return [0] * len(text)

    counter = TiktokenCounter(Encoding())
    assert not counter.splits_at_lines and count_lines(counter, "a\n- b\n") == 6
