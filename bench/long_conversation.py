"""Per-step CPU across a long conversation: 60 turns in one thread, each a run of 10 tool steps and the answer.

The worker is ``bench/worker_proc.py`` (``python -m bot worker``'s job: arq, the real agent, Redis state, Slack
posting to the fake Slack); the fake LLM answers at once, in its own process. Turn *k* is enqueued once turn
*k - 1* has ended, in the same thread, as a follow-up in Slack would be, so each run loads the thread's history
(22 messages a turn: the 500-message window is full from turn 23 on) and sends it, trimmed to
``AGENT_HISTORY_TOKENS``, with every request. CPU per step = the worker's process CPU over the turn's job (plus
the idle polls until the next one is picked up) / 11 LLM calls.

    python bench/long_conversation.py [--turns 60] [--reps 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from typing import Any

from common import delete_prefix, fake_llm, fake_slack, new_prefix, settings_values, summarize, write_json
from concurrency import CALLS, WorkerProcess, enqueue

from bot.identity import Conversation, Workspace
from bot.queue.jobs import Turn
from bot.redis import RedisHandle

REPORTED = (1, 10, 20, 30, 40, 50, 60)


def _turn(thread: Conversation, k: int) -> Turn:
    ts = f"{thread.thread_ts.split('.')[0]}.{k:06d}"
    return Turn(thread, turn_id=ts, text=f"Follow-up {k}: compute ten more things.", user_id="U1",
                reply_thread_ts=thread.thread_ts, message_ts=ts)


async def one_conversation(slack_url: str, llm_url: str, turns: int) -> list[float]:
    """CPU ms per step of each turn, in order."""
    prefix = new_prefix("long")
    values = settings_values(prefix, slack_url, llm_url, worker_max_jobs=4, thread_ttl_seconds=3600,
                             llm_price_prompt_per_1m="0.01", llm_price_completion_per_1m="0.01")
    handle = RedisHandle(values["redis_url"])
    worker = await WorkerProcess.start(values, turns)
    per_step: list[float] = []
    try:
        await worker.line("READY")
        warm_thread = Conversation(Workspace("T0001"), "CWARM", "1760000000.000000")
        await enqueue(handle, values, [_turn(warm_thread, 1)])
        last = json.loads(await worker.line("WARM"))["cpu"]
        thread = Conversation(Workspace("T0001"), "CLONG", "1760000001.000000")
        for k in range(1, turns + 1):
            await enqueue(handle, values, [_turn(thread, k)])
            cpu = json.loads(await worker.line("END"))["cpu"]
            per_step.append((cpu - last) * 1000 / CALLS)
            last = cpu
        await worker.line("DONE")
    finally:
        await worker.stop()
        await handle.close()
        await delete_prefix(prefix)
    return per_step


async def main(turns: int, reps: int) -> dict[str, Any]:
    with fake_slack() as (_, slack_url), fake_llm(calls=CALLS, tool="calculator") as (_, llm_url):
        curves = [await one_conversation(slack_url, llm_url, turns) for _ in range(reps)]
    # Each reported turn: the median over the reps of the mean of the 3 turns around it (one turn is noisy).
    def around(curve: list[float], k: int) -> float:
        window = curve[max(0, k - 2):min(len(curve), k + 1)]
        return statistics.fmean(window)

    return {
        "what": f"{turns} turns in one thread, each {CALLS - 1} tool steps and the answer, one at a time",
        "cpu_ms_per_step_by_turn": {str(k): summarize([around(c, k) for c in curves])
                                    for k in REPORTED if k <= turns},
        "curves": curves,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = asyncio.run(main(args.turns, args.reps))
    write_json(args.json, result)
    print("CPU ms per step by turn: " + ", ".join(
        f"{k}: {v['median']:.2f}" for k, v in result["cpu_ms_per_step_by_turn"].items()), file=sys.stderr)
