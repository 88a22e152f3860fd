"""Run the benchmarks that give a headline figure and rewrite the current-figures table at the top of BENCHMARKS.md.

Each benchmark (``bench/headlines.py``: which ones, with what settings) runs as its own process, one after the
other, with ``--json`` to a scratch file; the 1-minute load average is read before and after each. The table
between ``<!-- current:begin -->`` and ``<!-- current:end -->`` is replaced; the rest of the file is left as it is.
The raw outputs go to ``bench/results.json``.

    PYTHONPATH=$PWD python bench/run_all.py            # quick: one repetition, short settings (~3 minutes, 2 cores)
    PYTHONPATH=$PWD python bench/run_all.py --full     # 3 repetitions, the benchmarks' own durations, plus scale-out,
                                                       # long conversations, slow clients and the floods (~20 minutes)
    PYTHONPATH=$PWD python bench/run_all.py --only concurrency,redis_cost --print   # a subset, printed only

``--print`` (or ``--dry-run``) prints the table and writes nothing; ``--only`` always prints only, so the table in
the file is always one whole run's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

from bench_table import Row, render, replace_current
from common import BENCH_DIR, REPO, machine
from headlines import BENCHES, Bench

DOC = os.path.join(REPO, "BENCHMARKS.md")
TIMEOUT_SECONDS = 1800
STDERR_TAIL = 3000


def command(bench: Bench, full: bool) -> list[str]:
    args = bench.full if full else bench.quick
    assert args is not None
    return [f"bench/{bench.script}.py", *args]


def run_one(bench: Bench, full: bool) -> dict[str, Any]:
    """The benchmark's JSON output, with when it ran and the load average around it; ``error`` when it failed."""
    fd, path = tempfile.mkstemp(prefix=f"bench-{bench.key}-", suffix=".json")
    os.close(fd)
    args = command(bench, full)
    load_before = os.getloadavg()[0]
    started = datetime.now(UTC)
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, *args, "--json", path], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": REPO}, timeout=TIMEOUT_SECONDS)
        error = "" if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr[-STDERR_TAIL:]}"
        data: dict[str, Any] = {}
        if not error:
            with open(path) as f:
                data = json.load(f)
    except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
        error, data = f"{type(exc).__name__}: {exc}", {}
    finally:
        os.unlink(path)
    return {"command": "python " + " ".join(args), "started": started.isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - t0, 1), "load_before": load_before, "load_after": os.getloadavg()[0],
            "error": error, "output": data}


def rows_of(bench: Bench, result: dict[str, Any]) -> list[Row]:
    date = result["started"][:16].replace("T", " ")
    load = f"{result['load_before']:.2f} → {result['load_after']:.2f}"
    if result["error"]:
        cells = [(bench.key, "**failed**", result["error"].strip().splitlines()[-1][:120])]
    else:
        try:
            cells = bench.figures(result["output"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # the script's output changed shape
            cells = [(bench.key, "**unreadable output**", f"{type(exc).__name__}: {exc}")]
    return [Row(figure, value, spread, result["command"], date, load) for figure, value, spread in cells]


def preface(info: dict[str, Any], full: bool, total_seconds: float) -> str:
    mode = "`--full`: the benchmarks' own repetitions" if full else "quick: one repetition, short settings"
    return (f"Current figures: `PYTHONPATH=$PWD python bench/run_all.py{' --full' if full else ''}` ({mode}), "
            f"{info['date'][:16].replace('T', ' ')} UTC, {total_seconds:.0f} s in all; {info['cores']} cores "
            f"({info['cpu'] or 'unknown CPU'}), Python {info['python']}, Redis {info['redis_server'] or '?'}. "
            "Value is the median over the repetitions; spread is min–max over them when there are several, else "
            "the spread within the run that the cell names. Machine load: the 1-minute load average before → after "
            "the benchmark (2 cores: above ~1.5 the figures are the machine's queueing as much as the service's).")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="more repetitions and the long benchmarks (~20 min)")
    parser.add_argument("--quick", action="store_true", help="the default: one repetition, short settings")
    parser.add_argument("--only", help="comma-separated keys: " + ",".join(b.key for b in BENCHES))
    parser.add_argument("--print", "--dry-run", dest="print_only", action="store_true",
                        help="print the table, write nothing")
    parser.add_argument("--doc", default=DOC, help="the Markdown file with the markers")
    parser.add_argument("--out", default=os.path.join(BENCH_DIR, "results.json"), help="raw outputs")
    args = parser.parse_args()
    if args.full and args.quick:
        parser.error("--quick or --full, not both")
    chosen = [b for b in BENCHES if args.full or b.quick is not None]
    if args.only:
        keys = args.only.split(",")
        unknown = set(keys) - {b.key for b in BENCHES}
        if unknown:
            parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
        chosen = [b for b in BENCHES if b.key in keys and (args.full or b.quick is not None)]
    write = not (args.print_only or args.only)
    if write:
        with open(args.doc) as f:
            replace_current(f.read(), "")  # the markers are checked before minutes of benchmarks, not after
    info = machine()
    t0 = time.monotonic()
    results: dict[str, Any] = {}
    rows: list[Row] = []
    for bench in chosen:
        print(f"== {bench.key}: python {' '.join(command(bench, args.full))}", file=sys.stderr, flush=True)
        results[bench.key] = run_one(bench, args.full)
        if results[bench.key]["error"]:
            print(results[bench.key]["error"], file=sys.stderr)
        rows.extend(rows_of(bench, results[bench.key]))
    total = time.monotonic() - t0
    table = render(rows, preface(info, args.full, total))
    print(table)
    print(f"\ntotal {total:.0f} s", file=sys.stderr)
    if write:
        with open(args.doc) as f:
            document = f.read()
        with open(args.doc, "w") as f:
            f.write(replace_current(document, table))
        with open(args.out, "w") as f:
            json.dump({"machine": info, "full": args.full, "total_seconds": round(total, 1), **results}, f,
                      indent=2, default=str)
            f.write("\n")
        print(f"table written to {args.doc}, raw outputs to {args.out}", file=sys.stderr)
    return 1 if any(r["error"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
