"""BENCHMARKS.md's current table: rewritten between its markers, everything around it kept byte for byte."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"


def load_table() -> ModuleType:
    # bench/ is scripts, not a package: load the module from its file.
    spec = importlib.util.spec_from_file_location("bench_table", BENCH / "bench_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


table = load_table()

HEAD = "# Benchmarks\n\nIntro with a | pipe and <!-- another comment -->.\n\n"
TAIL = "\n\n## History\n\n- stop 21: 37 round trips.\n  trailing spaces  \n"
SAMPLE = f"{HEAD}{table.BEGIN}\n| old | table |\n|---|---|\n| 1 | 2 |\n{table.END}{TAIL}"


def new_table() -> str:
    row = table.Row("CPU a step", "1.72 ms", "1.70–1.80 ms", "python bench/x.py --a|b", "2026-12-04 21:30",
                    "0.50 → 0.90")
    return str(table.render([row], preface="Current figures."))


def test_the_markers_content_is_replaced_and_the_rest_kept() -> None:
    out = table.replace_current(SAMPLE, new_table())
    assert out == f"{HEAD}{table.BEGIN}\n{new_table()}\n{table.END}{TAIL}"
    assert "| old | table |" not in out


def test_rewriting_twice_gives_the_same_document() -> None:
    once = table.replace_current(SAMPLE, new_table())
    assert table.replace_current(once, new_table()) == once


def test_a_row_renders_every_column_and_escapes_pipes() -> None:
    lines = new_table().splitlines()
    assert lines[0] == "Current figures."
    assert lines[2] == "| figure | value | spread | command | date | machine load |"
    assert lines[4] == ("| CPU a step | 1.72 ms | 1.70–1.80 ms | `python bench/x.py --a\\|b` | 2026-12-04 21:30 "
                        "| 0.50 → 0.90 |")


@pytest.mark.parametrize("document", [
    "no markers at all",
    f"{table.END}\n{table.BEGIN}",
    f"{table.BEGIN}\nonly the start",
    f"{table.BEGIN}{table.END}\n{table.BEGIN}{table.END}",
])
def test_a_document_without_one_pair_of_markers_is_refused(document: str) -> None:
    with pytest.raises(ValueError):
        table.replace_current(document, new_table())
