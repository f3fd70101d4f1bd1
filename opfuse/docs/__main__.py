"""``python -m opfuse.docs [--write PATH]``: print docs/supported_ops.md, or write it to PATH."""

from __future__ import annotations

import argparse
import sys

from opfuse.docs.supported_ops import render
from opfuse.errors import OpfuseError
from opfuse.output import write_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opfuse.docs", description=__doc__)
    parser.add_argument("--write", metavar="PATH", help="write the page to PATH (default: stdout)")
    args = parser.parse_args(argv)
    try:
        write_file(args.write or "-", render())
    except OpfuseError as exc:
        print(f"opfuse: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
