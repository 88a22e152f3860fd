"""Taking over runs whose worker died: every worker looks for lapsed run leases (at start-up, then every
``scan_seconds``) and resumes each one it wins from the run's last persisted step; a run that had finished
before its worker died gets the answer it may not have posted (the run's own recovery, :mod:`bot.runs.recovery`).

A lease lapses ``AGENT_LEASE_SECONDS`` after its runner last renewed it: the worker was killed, lost Redis, or
handed it over on shutdown. Only one of several racing workers wins a lease (``RunLeases.acquire``), and a runner
that lost its lease stops before its next LLM call or post, so a run never has two live runners. arq's own
rerun of the dead job stays as the backstop: it finds the lease live and leaves the run alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from redis.exceptions import RedisError

from agent_core import Lease, RunLeases, StoreError
from bot.i18n import _, speaking
from bot.keys import AppKeys
from bot.queue.parked import ApprovalExpiry
from bot.queue.turns import ThreadQueue
from bot.runs.run import TurnRunner
from bot.thread import render
from bot.thread.sink import PostedSoFar
from bot.turn import join_id, parse_lease_id

log = logging.getLogger(__name__)

#: Resumes of one run before it is given up with an error (a run that dies every time must not loop forever).
MAX_RESUMES = 3
#: Lapsed leases looked at per scan.
SCAN_LIMIT = 100


def holder_of(worker_id: str, job_id: str) -> str:
    """A lease holder: unique per worker process and attempt (arq reruns a job under the same id)."""
    return join_id(worker_id, job_id, uuid.uuid4().hex[:8])


class Resumer:
    """Finds lapsed runs and resumes them on this worker (one per worker process)."""

    def __init__(
        self, leases: RunLeases, threads: ThreadQueue, runner: TurnRunner, keys: AppKeys, *, worker_id: str,
        ttl_seconds: int, deadline_seconds: float, max_concurrent: int,
    ) -> None:
        self.leases = leases
        self.threads = threads
        self.runner = runner
        self.keys = keys
        self.worker_id = worker_id
        self.scan_seconds = min(10.0, leases.seconds)
        self._ttl = ttl_seconds
        self._deadline = deadline_seconds
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: set[asyncio.Task[None]] = set()
        self.expiry: ApprovalExpiry | None = None

    async def run_forever(self) -> None:
        """Scan now, then every ``scan_seconds``; a Redis outage only delays the next scan."""
        try:
            while True:
                try:
                    await self.scan()
                    await self.threads.sweep_lines()
                    await self.runner.open_streams.sweep()  # streams their runs could not stop
                    if self.expiry is not None:
                        await self.expiry.sweep()  # approvals of parked runs past their deadline
                except (RedisError, OSError) as exc:
                    log.warning("resume scan skipped: Redis failed (%s)", exc)
                await asyncio.sleep(self.scan_seconds)
        finally:
            for task in list(self._tasks):
                task.cancel()  # a shutdown: their keepers hand the leases over for another worker
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def scan(self) -> int:
        """Take over every lapsed run this worker wins (as far as it has room); the number started."""
        started = 0
        for run in await self.leases.lapsed(SCAN_LIMIT):
            if self._slots.locked():
                break  # full: another worker (or the next scan) takes the rest
            lease = await self.leases.acquire(run, holder_of(self.worker_id, "resume"))
            if lease is None:
                continue  # another worker was faster
            task = asyncio.create_task(self._resume(lease))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        return started

    async def _resume(self, lease: Lease) -> None:
        """Resume one run; a failure is logged here (the task's exception is nobody else's to read), and a run
        Redis failed under is left to lapse again, for a later scan."""
        try:
            await self._take_over(lease)
        except (StoreError, RedisError, OSError) as exc:
            log.warning("resume of run %s stopped: Redis failed (%s); resumed again once its lease lapses",
                        lease.run_id, exc)
        except Exception:
            log.exception("resume of run %s failed; resumed again once its lease lapses", lease.run_id)

    async def _take_over(self, lease: Lease) -> None:
        async with self._slots:
            try:
                conversation, turn_id = parse_lease_id(lease.run_id)
            except ValueError:  # not a run this code keeps: nothing to resume
                conversation, turn_id = None, ""
            turn = await self.threads.turn(conversation, turn_id) if conversation else None
            if turn is None:  # finished (or expired) meanwhile: nothing to resume
                with contextlib.suppress(Exception):
                    await self.leases.release(lease)
                return
            ledger = PostedSoFar(self.runner.redis, self.keys.run(turn.thread, turn.run_id), self._ttl)
            seen = await ledger.get()
            job_id = seen.get("job", "")
            resumes = await ledger.bump("resumes")
            log.warning("resuming run %s of %s (taken over from %s, resume %d)", turn.run_id, turn.thread,
                        lease.previous_holder or "nobody", resumes)
            if resumes > MAX_RESUMES:
                with contextlib.suppress(Exception):
                    poster = await self.runner.poster(turn)
                    users = self.runner.workspace.users
                    with speaking(await users.locale(poster.client, turn.workspace, turn.user_id)):
                        given_up = _("`error`: the run was interrupted {n} times and is given up; please ask again.")
                    await poster.post(turn.target, render.error_message(given_up.format(n=resumes - 1)))
                with contextlib.suppress(Exception):
                    await self.leases.release(lease)
                outcome = "done"
            else:
                await self.threads.hold(turn.conversation)  # the run goes on here: its workspace slot stays taken
                async with asyncio.timeout(self._deadline):
                    outcome = await self.runner.run(turn, resumed=True, last_try=False, holder=lease.holder,
                                                    job_id=job_id, lease=lease)
            if outcome == "done":  # the lease is released by now
                # The dead job's slot goes too, and the thread's next turn is queued.
                await self.threads.finish(turn.conversation, turn.turn_id, job_id)
