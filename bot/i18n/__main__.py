"""``python -m bot.i18n update [LANGUAGE...]``: the catalogs brought in line with the source's texts."""

from __future__ import annotations

import argparse

from bot.i18n.catalogs import gaps, update


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot.i18n", description=__doc__)
    parser.add_argument("command", choices=["update"])
    parser.add_argument("languages", nargs="*", help="languages to start a catalog for (ISO 639-1, e.g. fr)")
    args = parser.parse_args(argv)
    for path in update(args.languages):
        missing = gaps(path.parent.parent.name)
        print(f"{path}: {len(missing)} texts to translate")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
