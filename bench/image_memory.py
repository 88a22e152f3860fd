"""Image memory: the resident memory of the process that runs the agent after it was given huge images.

Reproduces issue 37's report: 15 PNGs of 49 M pixels (about 160 KB each) over three runs, five a run, given to
``agent_core.files_in.task_message`` (what every run with files does before its first call) in one process, as
one worker process would see them. That process's peak (``VmHWM``) and final (``VmRSS``) resident memory are read
from outside it, from ``/proc``, before and after the runs; the reader processes that decode the images are
other processes and are not counted (their cap is ``tools.files.child.DEFAULT_MAX_MEMORY``).

    PYTHONPATH=$PWD python bench/image_memory.py [--runs 3] [--per-run 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import write_json

_CHILD = """
import asyncio, sys
from agent_core.attachments import Attachment
from agent_core.files_in import FileOptions, task_message
from tests.tools.file_samples import big_png

async def main(runs, per_run):
    data = big_png(7000, 7000)
    options = FileOptions(vision=True)
    print("ready", flush=True); sys.stdin.readline()
    for run in range(runs):
        files = [Attachment(f"scan-{run}-{n}.png", "image/png", data) for n in range(per_run)]
        built = await task_message("What is on these scans?", files, options, readable=False)
        assert len(built.sent["content"]) == per_run + 1, built.sent["content"][0]
    print("done", flush=True); sys.stdin.readline()

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
"""


def status_mb(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmHWM", "VmRSS")}


def measure(runs: int, per_run: int) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(runs), str(per_run)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        before = status_mb(proc.pid)
        t0 = time.perf_counter()
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done", "the runs failed"
        seconds = time.perf_counter() - t0
        after = status_mb(proc.pid)
        proc.stdin.write("\n")
        proc.stdin.flush()
    finally:
        proc.wait(timeout=60)
    return {"images": runs * per_run, "pixels_each": 7000 * 7000, "seconds": round(seconds, 2),
            "rss_before_mb": round(before["VmRSS"]), "peak_mb": round(after["VmHWM"]),
            "rss_after_mb": round(after["VmRSS"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-run", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = measure(args.runs, args.per_run)
    print(f"{result['images']} PNGs of 49 M pixels over {args.runs} runs in {result['seconds']} s: the agent's "
          f"process {result['rss_before_mb']} MB before, peak {result['peak_mb']} MB, {result['rss_after_mb']} MB "
          "after")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
