"""The remat command. Each subcommand is one module in remat/commands/ exposing NAME, HELP,
add_arguments(parser) and run(args) -> int; they are found by name, so adding a command touches
no other file.

Exit codes: 0 done, 1 the result is infeasible (no plan fits the budget), 2 an error remat
explains in one line on stderr (a bad budget, graph, model, input or solver name). Progress
bars go to stderr when it is a terminal (--progress always|never overrides, as does
REMAT_PROGRESS=1|0); results go to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
import textwrap

from . import commands

EXIT_INFEASIBLE = 1
EXIT_ERROR = 2


def plain(text: str) -> str:
    """Help text without reStructuredText markup: ``x``, :class:`x`, **x** -> x."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    return text


class _Formatter(argparse.HelpFormatter):
    """argparse's help, with paragraphs kept and words (solver names with hyphens) never split."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
        return "\n\n".join(textwrap.fill(p, width, initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False, break_long_words=False) for p in paragraphs if p)


def _details(doc: str | None) -> str | None:
    """A command module's docstring without its first paragraph (the usage line), as plain text."""
    parts = (doc or "").strip().split("\n\n", 1)
    return plain(parts[1].strip()) if len(parts) > 1 and parts[1].strip() else None


def version() -> str:
    from . import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remat", description="Train PyTorch models in less memory by recomputing activations.",
        epilog=plain(__doc__.split("\n\n", 1)[1]).strip(), formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"remat {version()}")
    parser.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                        help="progress bars on stderr: auto (when stderr is a terminal), always or never")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{commands.__name__}.{info.name}")
        p = sub.add_parser(mod.NAME, help=plain(mod.HELP), description=plain(mod.HELP),
                           epilog=_details(mod.__doc__), formatter_class=_Formatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (argparse's own errors and --help included)."""
    from . import progress
    from .errors import InfeasibleError, RematError

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, a usage error: argparse has printed it
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_ERROR)
    progress.enable({"auto": None, "always": True, "never": False}[args.progress])
    try:
        return int(args._run(args) or 0)
    except InfeasibleError as e:
        print(f"remat {args.command}: infeasible: {e}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except RematError as e:
        print(f"remat {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:  # a file or folder that cannot be read or written
        print(f"remat {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"remat {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        progress.enable(None)


if __name__ == "__main__":
    sys.exit(main())
