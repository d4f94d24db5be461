"""gpuobsctl completion bash: a bash completion script for gpuobsctl, made from its own parser
(so it always knows every subcommand and flag).  Use: `source <(gpuobsctl completion bash)`, or
write it to /etc/bash_completion.d/gpuobsctl."""

from __future__ import annotations

import argparse

NAME = "completion"
HELP = "print a shell completion script (bash)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=["bash"])


def flags_of(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(option for action in parser._actions for option in action.option_strings)


def bash_script(parser: argparse.ArgumentParser) -> str:
    """A completion function: subcommands in the first position, then that subcommand's flags
    (and the global ones); files for anything else."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cases = "\n".join(
        f'        {name}) flags="{" ".join(flags_of(sub))}" ;;' for name, sub in sorted(subparsers.choices.items())
    )
    return f"""# bash completion for gpuobsctl (gpuobsctl completion bash)
_gpuobsctl() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} command="" flags="" word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        case "$word" in
            --address|--output|--tls-ca|--token-file) ((i++)) ;;
            -*) ;;
            *) command=$word; break ;;
        esac
    done
    if [[ -z $command ]]; then
        COMPREPLY=($(compgen -W "{" ".join(sorted(subparsers.choices))} {" ".join(flags_of(parser))}" -- "$cur"))
        return
    fi
    case "$command" in
{cases}
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -F _gpuobsctl gpuobsctl
"""


def run(args: argparse.Namespace) -> int:
    from ..main import build_parser

    print(bash_script(build_parser()), end="")
    return 0
