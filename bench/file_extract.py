"""File extraction: time and peak memory to read a 50-page PDF and a 10 MB CSV through ``tools.files.extract``.

A PDF is parsed in a reader process started for it (``tools.files.readers``: memory cap, time limit), so its
time includes the process start, measured alone on a 1-page PDF; its memory is that process's peak RSS. A CSV is
decoded in a worker thread of the calling process: its memory is the Python allocations that decoding adds
(``tracemalloc``). The files are generated: the PDF by ``tests.tools.file_samples`` (text on every page, about
3,000 characters each), the CSV as 8-column rows. Each case runs ``--reps`` times in a process of its own (so the
peaks are its own); median and worst are shown.

    PYTHONPATH=$PWD python bench/file_extract.py [--reps 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from typing import Any

from common import write_json

from tests.tools.file_samples import docx_bytes, pdf_bytes
from tools.files import extract, sniff

PDF_PAGES = 50
CSV_BYTES = 10 * 1024 * 1024
TIMEOUT = 60.0
MAX_CHARS = 20_000_000


def pdf(pages: int) -> bytes:
    lines = [f"Line {n}: revenue for region {n % 7} grew by {n % 13}.{n % 10} percent this quarter" for n in range(40)]
    return pdf_bytes(["\n".join([f"Page {p}", *lines]) for p in range(1, pages + 1)])


def csv(size: int) -> bytes:
    rows = ["id,date,region,product,units,price,total,note"]
    n, total = 0, len(rows[0])
    while total < size:
        n += 1
        rows.append(f"{n},2026-{n % 12 + 1:02d}-{n % 28 + 1:02d},region-{n % 9},sku-{n % 997},{n % 50},"
                    f"{n % 300}.{n % 100:02d},{(n % 50) * (n % 300)},\"plain note {n % 31}\"")
        total += len(rows[-1]) + 1
    return "\n".join(rows).encode()[:size]


async def measure(name: str, data: bytes, reps: int) -> dict[str, Any]:
    mimetype = sniff(data, name)
    seconds, chars, child_peak, own_peak = [], 0, 0, 0
    for _ in range(reps):
        tracemalloc.start()
        t0 = time.perf_counter()
        extracted = await extract(data, mimetype, timeout=TIMEOUT, max_chars=MAX_CHARS)
        seconds.append(time.perf_counter() - t0)
        own_peak = max(own_peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        chars = len(extracted.text)
        # The largest RSS of any reader process so far (this bench starts no other children).
        child_peak = max(child_peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    child = not mimetype.startswith("text/")
    return {
        "file": name,
        "bytes": len(data),
        "chars": chars,
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1),
        "where": "reader process" if child else "worker thread",
        "peak_mb": round((child_peak if child else own_peak) / 2**20, 1),
    }


CASES = {
    "one-page.pdf": lambda: pdf(1),
    f"{PDF_PAGES}-pages.pdf": lambda: pdf(PDF_PAGES),
    "500-paras.docx": lambda: docx_bytes([f"Paragraph {n}: " + "words " * 40 for n in range(500)]),
    "10mb.csv": lambda: csv(CSV_BYTES),
}


def run(reps: int) -> list[dict[str, Any]]:
    rows = []
    for name in CASES:
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--case", name, "--reps", str(reps)],
            capture_output=True, text=True, check=True, timeout=600,
        )
        rows.append(json.loads(done.stdout))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'file':<16}{'size':>10}{'chars':>12}{'median':>10}{'worst':>10}  {'peak memory':<30}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['file']:<16}{r['bytes'] / 2**20:>8.2f}MB{r['chars']:>12,}{r['median_ms']:>8.0f}ms"
                     f"{r['max_ms']:>8.0f}ms  {r['peak_mb']:.1f} MB ({r['where']})")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 repetitions")
    parser.add_argument("--json", nargs="?", const="", help="write the figures as JSON (to stdout without a path)")
    parser.add_argument("--case", choices=list(CASES), help=argparse.SUPPRESS)  # one case, in its own process
    args = parser.parse_args()
    reps = 2 if args.quick else args.reps
    if args.case:
        print(json.dumps(asyncio.run(measure(args.case, CASES[args.case](), reps))))
        return 0
    rows = run(reps)
    if args.json is None:
        print(table(rows))
    else:
        write_json(args.json or None, {"cases": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
