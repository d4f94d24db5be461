"""gpuobsctl completion bash|zsh|fish: the shell code that completes gpuobsctl's subcommands,
flags and choices (modes, shells, outputs). It is argcomplete's: the shell asks gpuobsctl itself
at each Tab, so the completions are always those of the installed parser."""

from __future__ import annotations

import argparse

import argcomplete

NAME = "completion"
HELP = "print the shell code that completes gpuobsctl (bash, zsh or fish)"
EXAMPLES = """examples:
  source <(gpuobsctl completion bash)                 # this shell; or write it to /etc/bash_completion.d/gpuobsctl
  gpuobsctl completion zsh > "${fpath[1]}/_gpuobsctl"  # zsh (with compinit)
  gpuobsctl completion fish > ~/.config/fish/completions/gpuobsctl.fish"""
SHELLS = ("bash", "zsh", "fish")
JSON_OUTPUT = False  # shell code has no JSON form


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell the code is for")


def run(args: argparse.Namespace) -> int:
    print(argcomplete.shellcode(["gpuobsctl"], shell=args.shell), end="")
    return 0
