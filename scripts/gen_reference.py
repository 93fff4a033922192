"""Write the generated reference pages under docs/reference/ from the code that defines them.

PYTHONPATH=service python scripts/gen_reference.py           # rewrite the pages
PYTHONPATH=service python scripts/gen_reference.py --check   # exit 1 if one is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from memoryd.transport.status_map import reference_markdown as errors_reference

ROOT = Path(__file__).resolve().parents[1]

# Page -> the function rendering it.
PAGES: dict[Path, Callable[[], str]] = {
    ROOT / "docs" / "reference" / "errors.md": errors_reference,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale pages")
    args = parser.parse_args(argv)
    stale = []
    for page, render in PAGES.items():
        text = render()
        if page.is_file() and page.read_text(encoding="utf-8") == text:
            continue
        stale.append(page.relative_to(ROOT))
        if not args.check:
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(text, encoding="utf-8")
    for page in stale:
        print(f"{'stale' if args.check else 'wrote'}: {page}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
