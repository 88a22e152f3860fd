"""CPU time of the exfiltration guard's leak check (``LeakIndex.find``) on one outbound argument, off the event
loop in the service: ordinary prose with URLs, a long base64 run, and a run of one letter (the worst case for
the run decoders), each about 20 KB, against a channel's worth of private text.

    python bench/leak_check.py [--reps 20] [--leaks PATH] [--json out.json]

``--leaks`` loads another copy of ``tools/leaks.py`` (e.g. ``git show <commit>:tools/leaks.py > /tmp/old.py``)
for a before/after figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from types import ModuleType

PRIVATE = ("U2: the launch code is zeta-7731-quartz, card 4111 1111 1111 1111, PIN 4821 and key "
           "sk_live_51HxQm2Zr8\n") * 50
TEXTS = {
    "prose with URLs": "the quick brown fox jumps over the lazy dog https://example.com/path/to-page?q=hi+there " * 200,
    "base64 run": "https://x.test/c?k=" + "QUJD" * 5000,
    "one letter": "a" * 20_000,
}


def load(path: str | None) -> ModuleType:
    if path is None:
        import tools.leaks

        return tools.leaks
    spec = importlib.util.spec_from_file_location("leaks_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--leaks", default=None)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    leaks = load(args.leaks)
    index = leaks.LeakIndex([PRIVATE])
    by_text: dict[str, dict[str, float]] = {}
    for name, text in TEXTS.items():
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            found = index.find(text)
            times.append(time.perf_counter() - start)
        by_text[name] = {"chars": len(text), "median_ms": 1000 * statistics.median(times),
                         "min_ms": 1000 * min(times), "max_ms": 1000 * max(times), "leak": found is not None}
        print(f"{name:16} {len(text):6} chars  median {1000 * statistics.median(times):7.1f} ms  "
              f"max {1000 * max(times):7.1f} ms  leak={found is not None}")
    if args.json:
        import json  # here, not at the top: only the --json output needs it

        with open(args.json, "w") as f:
            json.dump({"reps": args.reps, "texts": by_text}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
