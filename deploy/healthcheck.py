"""The image's HEALTHCHECK: exit 0 when this container's ``python -m bot`` answers ``GET /healthz`` with 200.

Either role, without knowing which: a web (or ``all``) process serves ``/healthz`` on PORT; a worker serves it on
WORKER_HEALTH_PORT (by default PORT + 1, as ``Settings.listen_port`` says) and nothing on PORT. So PORT is asked
first, and the worker's port only when nothing listens on PORT. An answer other than 200 (503: Redis refuses
writes, the worker is not polling) is unhealthy at once. The standard library only: importing the settings would
cost seconds of CPU on every check.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_PORT = 3000
#: Docker's HEALTHCHECK --timeout is 10 s: both ports are asked within it.
TIMEOUT_SECONDS = 4.0


def ports(env: dict[str, str]) -> list[int]:
    port = int(env.get("PORT") or DEFAULT_PORT)
    return [port, int(env.get("WORKER_HEALTH_PORT") or port + 1)]


def healthy(port: int) -> bool | None:
    """True for 200, False for another answer, None when nothing answers on ``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=TIMEOUT_SECONDS) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:
        print(f"/healthz on port {port}: {exc.code} {exc.read(300).decode(errors='replace')}", file=sys.stderr)
        return False
    except OSError:  # refused or silent: not this role's port, or the process is gone
        return None


def main() -> int:
    asked = ports(dict(os.environ))
    for port in asked:
        answer = healthy(port)
        if answer is not None:
            return 0 if answer else 1
    print(f"nothing answers /healthz on port {asked[0]} or {asked[1]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
