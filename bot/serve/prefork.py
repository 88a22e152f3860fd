"""What ``python -m bot`` decides before it imports the service: how many processes, and, for a supervisor, the
shared metrics folder and then the one import its forked children share (a pre-fork server's preload).

A supervisor's children used to be ``python -m bot <role> --processes 1`` each: every child imported the whole
service again (0.7 CPU-s), a worker the ``openai`` client and its tokenizer's tables too (1.4 CPU-s in all), at
every start and every restart. Now the supervisor imports them once and forks its children (``bot.serve.forked``):
a child starts in milliseconds and shares those pages with its siblings until it writes them.

Order matters here: prometheus-client picks file-backed values for every process when it is first imported, if
``PROMETHEUS_MULTIPROC_DIR`` is set then. So this module imports nothing that imports it (``bot.metrics``): the
supervisor reads its process count, makes the folder and sets the variable, and only then imports the service.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent_core import ConfigError, preload_engine
from bot.metrics_settings import MULTIPROC_ENV
from bot.serve.forked import open_fds
from bot.settings_base import Role

#: The run's metrics folder in the temporary directory: ``bot-metrics-<supervisor pid>-<random>``.
METRICS_DIR_PREFIX = "bot-metrics-"


def shared_metrics_dir() -> Path:
    """A fresh metrics folder for this run, named in ``PROMETHEUS_MULTIPROC_DIR`` for this process and every child.

    Before it, the folders of supervisors that are gone are removed."""
    if "prometheus_client" in sys.modules:  # its values would stay in memory, each child's invisible to a scrape
        raise RuntimeError("prometheus-client was imported before the supervisor's metrics folder was set")
    if not hasattr(os, "pidfd_open") or not os.path.isdir("/proc/self/fd"):
        raise ConfigError("--processes N (and the default of `worker` and `python -m bot`, one per core) needs "
                          "Linux: elsewhere run one process per role with --processes 1")
    remove_abandoned_metrics_dirs()
    folder = Path(tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-"))
    os.environ[MULTIPROC_ENV] = str(folder)
    return folder


def remove_abandoned_metrics_dirs() -> None:
    """Remove the metrics folders of this user's supervisors that are gone: one killed with SIGKILL (which no
    clean-up survives) left its folder behind, named after its pid."""
    for folder in Path(tempfile.gettempdir()).glob(f"{METRICS_DIR_PREFIX}*-*"):
        pid = folder.name.removeprefix(METRICS_DIR_PREFIX).split("-", 1)[0]
        with contextlib.suppress(OSError):
            if pid.isdigit() and folder.stat().st_uid == os.getuid() and not _running(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


@dataclass(frozen=True)
class ChildStart:
    """What a forked child starts from: the function it runs for its role (``python -m bot <role> --processes 1``'s
    main; its result the exit code), and the file descriptors open once the service was imported, the only ones
    of the supervisor's it keeps."""

    run: Callable[[Role], int]
    fds: frozenset[int]


def preload(role: Role, model: str, tokenizer: str, run: Callable[[Role], int]) -> ChildStart:
    """Import what the children of ``role`` run, once, before they are forked: the service, and for workers the
    LLM client's library and the model's tokenizer tables; then keep it all out of the cyclic collector's walks
    (a collection would touch, and so copy, every shared page in each child). What each child then runs: ``run``."""
    import bot.serve.service  # noqa: F401  (the web side, the worker side and everything under them)

    if role != "web":
        preload_engine(model, tokenizer)
    gc.collect()
    gc.freeze()
    return ChildStart(run, open_fds())
