"""gpuobsctl: the command line of gpuobsd. Exit 0 on success, 2 for a usage error (found before
any call), 1 for a failure, 130 on Ctrl-C; every failure with a one-line reason."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

import argcomplete
from gpuobs import version_line

from .commands import COMMANDS
from .connection import CommandError, UsageError, address_of, configure_tcp
from .entry import interrupted
from .output import show_full_names

USAGE_ERROR = 2  # as POSIX utilities and argparse: wrong usage, told apart from a failure (1)
INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")


def did_you_mean(message: str) -> str:
    """The message of an invalid choice with the nearest valid one suggested (a typo of a
    subcommand or mode), else the message as it was."""
    found = INVALID_CHOICE.search(message)
    if not found:
        return message
    choices = [choice.strip().strip("'") for choice in found["choices"].split(",")]
    close = difflib.get_close_matches(found["given"], choices, n=1, cutoff=0.6)
    return f"{message}; did you mean '{close[0]}'?" if close else message


class Parser(argparse.ArgumentParser):
    """Usage errors exit 2 with the one-line reason (and the nearest valid choice), before any
    call to gpuobsd."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"gpuobsctl: {did_you_mean(message)}\n")


def add_global_flags(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """--address, --output and the TCP settings, before the subcommand (with their defaults) and
    after it too (without: a flag given there overrides, one not given leaves the earlier value)."""

    def default(value: object) -> dict:
        return {"default": value if defaults else argparse.SUPPRESS}

    parser.add_argument(
        "--address", help="gpuobsd address [GPUOBS_ADDRESS, default unix:///run/gpuobs/gpuobsd.sock]", **default(None)
    )
    parser.add_argument(
        "--output", choices=["table", "json"], help="table for people, json for programs", **default("table")
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="whole kernel names in tables (cut to their column on a terminal; whole when piped)",
        **default(False),
    )
    parser.add_argument(
        "--tls-ca", help="a TCP address: the CA of gpuobsd's certificate [GPUOBS_TLS_CA]", **default(None)
    )
    parser.add_argument(
        "--token-file", help="a TCP address: the file holding gpuobsd's token [GPUOBS_TOKEN_FILE]", **default(None)
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gpuobsctl",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="Each subcommand's --help has an example; `gpuobsctl completion bash|zsh|fish` completes them.",
    )
    add_global_flags(parser, defaults=True)
    parser.add_argument("--version", action="version", version=version_line("gpuobsctl"))
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(
            command.NAME,
            help=command.HELP,
            description=command.HELP,
            epilog=getattr(command, "EXAMPLES", None),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_global_flags(sub, defaults=False)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run, subcommand=command, subparser=sub)
    return parser


def not_utf8(args: argparse.Namespace) -> str | None:
    """The first argument that is not valid UTF-8 (gRPC strings must be), or None."""
    for name, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return name
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)  # a shell asking for completions (gpuobsctl completion SHELL): answers, exits
    args = parser.parse_args(argv)
    bad = not_utf8(args)
    if bad:
        parser.error(f"argument {bad.replace('_', '-')}: not valid UTF-8")
    if args.output == "json" and not getattr(args.subcommand, "JSON_OUTPUT", True):
        parser.error(f"{args.subcommand.NAME} has no JSON output ({args.subcommand.HELP})")
    show_full_names(args.wide or not sys.stdout.isatty())
    args.address = address_of(args.address)
    configure_tcp(args.tls_ca, args.token_file)
    try:
        return args.run(args)
    except UsageError as error:  # as argparse's own: the usage, then the reason
        args.subparser.print_usage(sys.stderr)
        print(f"gpuobsctl: {error}", file=sys.stderr)
        return USAGE_ERROR
    except CommandError as error:
        print(f"gpuobsctl: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `gpuobsctl ... | head`: the reader has what it wanted; no traceback, and no second
        # error when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Ctrl-C: the call in flight is cancelled with its channel as the process ends
        return interrupted()


if __name__ == "__main__":
    sys.exit(main())
