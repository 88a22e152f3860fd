"""``python -m bot eval``: the golden set (and the injection set) through the real pipeline, scored per model.

    python -m bot eval --scripted                           # the scripted models on the fake endpoint
    OPENAI_BASE_URL=... OPENAI_API_KEY=... python -m bot eval --models gpt-4o-mini,gpt-4o --k 4 --max-usd 5

The endpoint is the deployment's (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OPENAI_MODEL`` from the environment or
``.env``); with none configured, or with ``--scripted``, the models are ``scripted-good`` and ``scripted-bad`` on a
local fake endpoint (no money is spent). On a real endpoint ``--max-usd`` is required: no run starts once its
worst case (``--run-cap``) would take the total past it. Runs from a checkout of the project (it uses the tests'
fakes: ``tests/fakes``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from urllib.parse import urlsplit

from agent_core import AgentSettings
from evalkit.cases import CaseError, load_cases
from evalkit.report import write
from evalkit.runner import Endpoint, Options, evaluate

ROOT = Path(__file__).resolve().parents[1]
BAR_WIDTH = 30


def _usd(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"a dollar amount such as 5 or 0.50, got {text!r}") from None
    if not value.is_finite() or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bot eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", help="comma-separated models (AGENT_MODELS entries: name or name:prompt/completion "
                   "USD per 1M tokens); default: the scripted models on the fake endpoint, OPENAI_MODEL on a real one")
    p.add_argument("--k", type=_positive, default=1, help="tries per case and model; pass^k needs k of them")
    p.add_argument("--cases", default="*", help="glob(s) over case ids or category/id, comma-separated")
    p.add_argument("--concurrency", type=_positive, default=4, help="runs at once")
    p.add_argument("--report", type=Path, default=Path("eval-report.md"), help="Markdown report (JSON and PNG beside)")
    p.add_argument("--max-usd", type=_usd, help="spend cap over the whole evaluation (required on a real endpoint)")
    p.add_argument("--run-cap", type=_usd, default=Decimal("0.50"), help="cost cap of one run, USD")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds a turn may take before it counts as failed")
    p.add_argument("--scripted", action="store_true",
                   help="the scripted models on a local fake endpoint, even when an endpoint is configured")
    p.add_argument("--dir", type=Path, default=ROOT / "evals", help="where the cases are")
    return p


def progress(done: int, total: int, spent: int) -> None:
    filled = BAR_WIDTH * done // max(total, 1)
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    print(f"\r[{bar}] {done}/{total} turns  ${spent / 1e6:.4f}", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def configured(scripted: bool) -> Endpoint:
    """The deployment's endpoint (``OPENAI_*`` from the environment or ``.env``) when it names one (a key or a base
    URL), else, or with ``--scripted``, the fake endpoint and its scripted models."""
    settings = AgentSettings()
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    if scripted or not (key or "OPENAI_BASE_URL" in os.environ):
        return Endpoint()
    return Endpoint(settings.openai_base_url, key or "sk-none", [settings.openai_model])


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    endpoint = configured(args.scripted)
    base_url = endpoint.base_url
    if base_url and args.max_usd is None:
        print("error: --max-usd is required with a real endpoint (OPENAI_API_KEY or OPENAI_BASE_URL is set; "
              "--scripted runs the scripted models instead)", file=sys.stderr)
        return 2
    if models := [m.strip() for m in (args.models or "").split(",") if m.strip()]:
        endpoint.models = models
    try:
        cases = load_cases(args.dir, args.cases)
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not cases:
        print(f"error: no case under {args.dir} matches --cases {args.cases!r}", file=sys.stderr)
        return 2
    options = Options(k=args.k, concurrency=args.concurrency, max_usd=args.max_usd, turn_timeout=args.timeout,
                      redis_url=os.environ.get("REDIS_URL") or None, run_cap_usd=args.run_cap, progress=progress)
    started = time.monotonic()
    results = asyncio.run(evaluate(cases, endpoint, options))
    where = f"the endpoint at {urlsplit(base_url).hostname}" if base_url else "the fake endpoint (scripted models)"
    header = (f"{len(cases)} cases, k={args.k}, against {where}; {len(results)} runs in "
              f"{time.monotonic() - started:.0f} s.")
    for path in write(results, args.k, args.report, header):
        print(f"wrote {path}", file=sys.stderr)
    return 0
