"""A supervisor's children: how long and how much CPU until they serve, after a start and after a crash, and the
memory they hold, for ``python -m bot worker --processes N`` against the bench's fake Slack and LLM.

Each child logs ``worker process on the ... event loop`` once it serves; the tree's CPU is read from ``/proc``
(every process of it, the supervisor included) at that moment, and each child's proportional set size (PSS: a
page shared by k processes counts 1/k in each) from ``/proc/<pid>/smaps_rollup``. Then worker 1 is SIGKILLed and
the same is read for its replacement (the supervisor restarts it after its 0.5 s backoff, which is left out).

    python bench/child_start.py --workers 2 --reps 3 [--json out.json]
    python bench/child_start.py --checkout ../other-tree   # the same, for the code in another checkout
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import REPO, delete_prefix, fake_llm, fake_slack, settings_values, write_json

READY = re.compile(r"worker process on the \w+ event loop")
STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")
TICKS = os.sysconf("SC_CLK_TCK")
TIMEOUT = 60.0
#: The supervisor's first restart delay (``bot.serve.supervisor.RESTART_FIRST_DELAY_SECONDS``), left out.
RESTART_BACKOFF_SECONDS = 0.5


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


class Tree:
    """``python -m bot worker --processes N`` from ``checkout``, its log lines read as they come."""

    def __init__(self, checkout: Path, workers: int, env: dict[str, str]) -> None:
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "bot", "worker", "--processes", str(workers)],
                                     cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.children: dict[int, int] = {}

    def until_ready(self, count: int) -> float:
        """Seconds from now until ``count`` more children logged that they serve."""
        assert self.proc.stderr is not None
        began, ready = time.monotonic(), 0
        while ready < count:
            if time.monotonic() - began > TIMEOUT:
                raise TimeoutError("the workers did not get ready")
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("the supervisor exited")
            if found := STARTED.search(line):
                self.children[int(found.group(1))] = int(found.group(2))
            if READY.search(line):
                ready += 1
        return time.monotonic() - began

    def cpu(self) -> float:
        return cpu_of(self.proc.pid) + sum(cpu_of(pid) for pid in self.children.values())

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def once(checkout: Path, workers: int, env: dict[str, str]) -> dict[str, float]:
    tree = Tree(checkout, workers, env)
    try:
        tree.until_ready(workers)
        start_s = time.monotonic() - tree.started_at  # from the command's start
        start_cpu = tree.cpu()
        children_pss = [pss_kb(pid) for pid in tree.children.values()]
        tree_pss = pss_kb(tree.proc.pid) + sum(children_pss)
        killed = tree.children[1]
        before = cpu_of(tree.proc.pid)
        os.kill(killed, signal.SIGKILL)
        restart_s = tree.until_ready(1)
        restarted = tree.children[1]
        return {"start_s": start_s, "start_cpu_s": start_cpu, "child_pss_mb": statistics.mean(children_pss) / 1024,
                "tree_pss_mb": tree_pss / 1024, "restart_s": restart_s - RESTART_BACKOFF_SECONDS,
                "restart_cpu_s": cpu_of(restarted) + cpu_of(tree.proc.pid) - before}
    finally:
        tree.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--checkout", type=Path, default=Path(REPO), help="run the code of this checkout")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    prefix = f"bench-child-start-{secrets.token_hex(4)}"
    with fake_slack() as (_, slack_url), fake_llm() as (_, llm_url):
        values = settings_values(prefix, slack_url, llm_url, worker_health_port=0)
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(args.checkout.resolve()), "LOG_FORMAT": "text",
               **{k.upper(): str(v) for k, v in values.items()}}
        try:
            runs = [once(args.checkout.resolve(), args.workers, env) for _ in range(args.reps)]
        finally:
            asyncio.run(delete_prefix(prefix))
    result = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    if args.json:
        write_json(args.json, {"workers": args.workers, "reps": args.reps, **result})
        return
    print(f"python -m bot worker --processes {args.workers}, median of {args.reps} ({args.checkout})")
    for key, value in result.items():
        print(f"  {key:15} {value:8.2f}")


if __name__ == "__main__":
    main()
