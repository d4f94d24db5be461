"""The documentation names only what exists. In README.md, docs/*.md and deploy/README.md, every
`gpuobsctl SUBCOMMAND` written as code (a code span or a line of a code block) names a real
subcommand, and every --flag after it on that command line is one of that subcommand's or a
global one; every flag after `gpuobsd` is gpuobsd's, every flag after `gpuobs-synth` is
gpuobs-synth's (its long options table in synth/options.cpp); every metric name (`gpuobs_...`) is
in docs/metrics.md's list, which tests/daemon/test_metrics.py ties to a real scrape, allowing the
_total/_bucket/_count/_sum of its series; every repository path written alone as code exists; and
every relative link reaches a file, and a heading where it names one.

Prose is left alone: a command is checked only where it is written as code, a placeholder in
capitals (`gpuobsctl COMMAND --help`) is not a subcommand, and a command line ends where the shell
or the code span ends it (a pipe, `;`, `&&`, `)`, a comment, a bare `--`)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = sorted([ROOT / "README.md", ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md")])
LINKED = sorted([*CHECKED, ROOT / "bench" / "results" / "README.md"])
SERIES_SUFFIXES = ("_total", "_bucket", "_count", "_sum")

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# where a command line ends: the end of a code span, a pipe, a list of commands, a subshell's end,
# a redirection or a comment
END_OF_COMMAND = re.compile(r"`|\||;|&&|\)|>|<|\s#")
GPUOBSCTL = re.compile(r"(?<![\w.-])gpuobsctl(?=[ \t])")
GPUOBSD = re.compile(r"(?<![\w.-])gpuobsd(?=[ \t])")
SYNTH = re.compile(r"(?<![\w.-])gpuobs-synth(?=[ \t])")
FLAG = re.compile(r"^[\[(]*(--[a-z][a-z0-9-]*)")
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9-]*")
# a metric (or other gpuobs_ identifier): not part of a longer word, a path, a file name or a call
GPUOBS_NAME = re.compile(r"(?<![\w:/.-])gpuobs_[a-z0-9_]*[a-z0-9](?![\w(/-])(?!\.[A-Za-z])")
# other identifiers the docs may name besides metrics: the injector's exports, its patch
# functions, build targets, and the test helpers' package (tests/support/gpuobs_testing)
NATIVE_SOURCES = ("injector/exports.map", "injector/include/*.h", "injector/patches/*", "CMakeLists.txt", "cmake/*")
PACKAGES = "tests/support/gpuobs_*"
TOP_FOLDERS = "bench|client|cmake|daemon|deploy|docs|injector|proto|python|scripts|segment|synth|tests"
REPOSITORY_PATH = re.compile(rf"^(?:{TOP_FOLDERS})/[\w./-]*$")
PLACEHOLDER = re.compile(r"[A-Z]{2,}")
LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass
class Names:
    """What exists: gpuobsctl's subcommands and their flags, gpuobsd's and gpuobs-synth's flags,
    the metrics of docs/metrics.md and the other gpuobs_ identifiers of the native code."""

    subcommands: dict[str, set[str]]
    global_flags: set[str]
    global_flags_with_value: set[str]
    gpuobsd_flags: set[str]
    synth_flags: set[str]
    metrics: set[str]
    native: set[str] = field(default_factory=set)


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Its flags and those of its own subcommands (`deploy install --force` is a flag of deploy's)."""
    flags = {option for action in parser._actions for option in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= option_strings(sub)
    return flags


def gpuobsctl_names() -> tuple[dict[str, set[str]], set[str], set[str]]:
    from gpuobs.client.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    top = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    with_value = {o for a in top if a.nargs != 0 for o in a.option_strings}
    return {name: option_strings(sub) for name, sub in subparsers.choices.items()}, option_strings(parser), with_value


def gpuobsd_flags() -> set[str]:
    from gpuobs.daemon.main import build_parser

    return option_strings(build_parser())


def synth_flags() -> set[str]:
    """gpuobs-synth's long options, read from its getopt table (the binary need not be built)."""
    table = (ROOT / "synth" / "options.cpp").read_text()
    names = {"--" + name for name in re.findall(r'\{"([a-z][a-z0-9-]*)",\s*(?:no|required|optional)_argument', table)}
    assert names, "no long options found in synth/options.cpp"
    return names


def base_name(name: str) -> str:
    for suffix in SERIES_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def documented_metrics() -> set[str]:
    """The families docs/metrics.md lists, as tests/daemon/test_metrics.py reads them."""
    return set(re.findall(r"`(gpuobs_\w+)`", (ROOT / "docs" / "metrics.md").read_text()))


def native_identifiers() -> set[str]:
    """The gpuobs_ names of the native code, the build and the test helpers: not metrics, and real."""
    found: set[str] = set()
    for pattern in NATIVE_SOURCES:
        for path in ROOT.glob(pattern):
            if path.is_file():
                found |= set(re.findall(r"\bgpuobs_[a-z0-9_]+", path.read_text(errors="replace")))
    return found | {path.name for path in ROOT.glob(PACKAGES) if path.is_dir()}


@pytest.fixture(scope="module")
def names() -> Names:
    subcommands, global_flags, with_value = gpuobsctl_names()
    return Names(
        subcommands=subcommands,
        global_flags=global_flags,
        global_flags_with_value=with_value,
        gpuobsd_flags=gpuobsd_flags(),
        synth_flags=synth_flags(),
        metrics=documented_metrics(),
        native=native_identifiers(),
    )


def code_of(markdown: str) -> list[str]:
    """The text written as code: each line of a code block (a line ending in a backslash joined
    with the next, as the shell does) and the content of each code span (a span may run over the
    lines of a paragraph; a table row is a paragraph of its own)."""
    code: list[str] = []
    prose: list[str] = []
    in_block = False
    block_line = ""
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_block = not in_block
            prose.append("")
            continue
        if in_block:
            block_line += line
            if block_line.endswith("\\"):
                block_line = block_line[:-1] + " "
                continue
            code.append(block_line)
            block_line = ""
        else:
            prose.append(line)
    paragraphs: list[str] = []
    current: list[str] = []
    for line in prose:
        if not line.strip() or line.lstrip().startswith("|"):
            paragraphs.append(" ".join(current))
            current = []
            if line.strip():
                paragraphs.append(line)
        else:
            current.append(line)
    paragraphs.append(" ".join(current))
    for paragraph in paragraphs:
        code.extend(found[2] for found in CODE_SPAN.finditer(paragraph))
    return code


def command_tokens(line: str, start: int) -> list[str]:
    """The words of the command line that begins at `start`, up to where it ends."""
    rest = line[start:]
    end = END_OF_COMMAND.search(rest)
    return (rest[: end.start()] if end else rest).split()


def flags_in(tokens: list[str]) -> list[str]:
    """The --flags among these words, up to a bare `--` (what follows it is another command's)."""
    flags = []
    for token in tokens:
        if token == "--":
            break
        found = FLAG.match(token)
        if found:
            flags.append(found[1])
    return flags


def gpuobsctl_problems(line: str, names: Names) -> list[str]:
    problems = []
    for found in GPUOBSCTL.finditer(line):
        tokens = command_tokens(line, found.end())
        i = 0
        while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "--":
            flag = tokens[i].split("=", 1)[0]
            if flag not in names.global_flags:
                problems.append(f"gpuobsctl {flag}: not a global flag (before the subcommand)")
            i += 2 if flag in names.global_flags_with_value and "=" not in tokens[i] else 1
        if i >= len(tokens):
            continue
        subcommand = SUBCOMMAND.match(tokens[i])
        if not subcommand:
            continue  # a placeholder (COMMAND, ...), not a name
        if subcommand[0] not in names.subcommands:
            problems.append(f"gpuobsctl {subcommand[0]}: no such subcommand")
            continue
        allowed = names.subcommands[subcommand[0]] | names.global_flags
        for flag in flags_in(tokens[i + 1 :]):
            if flag not in allowed:
                problems.append(f"gpuobsctl {subcommand[0]} {flag}: not a flag of {subcommand[0]}")
    return problems


def tool_problems(line: str, tool: re.Pattern[str], flags: set[str], name: str) -> list[str]:
    return [
        f"{name} {flag}: not a flag of {name}"
        for found in tool.finditer(line)
        for flag in flags_in(command_tokens(line, found.end()))
        if flag not in flags
    ]


def metric_problems(markdown: str, names: Names) -> list[str]:
    known = names.metrics | {base_name(m) for m in names.metrics}
    return [
        f"{name}: not a metric of docs/metrics.md (nor a name of the injector's code)"
        for name in dict.fromkeys(GPUOBS_NAME.findall(markdown))
        if name not in known and base_name(name) not in known and name not in names.native
    ]


def path_problems(markdown: str) -> list[str]:
    """Repository paths written alone as code (`tests/gpu/harness.py`) that do not exist."""
    problems = []
    for line in code_of(markdown):
        text = line.strip()
        if REPOSITORY_PATH.match(text) and not PLACEHOLDER.search(text.replace("README", "")):
            if not (ROOT / text.rstrip("/")).exists():
                problems.append(f"{text}: no such file or folder in the repository")
    return problems


def check_text(markdown: str, names: Names) -> list[str]:
    """Every name of `markdown` that does not exist, one line each (empty when all do)."""
    problems = []
    for line in code_of(markdown):
        problems += gpuobsctl_problems(line, names)
        problems += tool_problems(line, GPUOBSD, names.gpuobsd_flags, "gpuobsd")
        problems += tool_problems(line, SYNTH, names.synth_flags, "gpuobs-synth")
    problems += metric_problems(markdown, names)
    problems += path_problems(markdown)
    return list(dict.fromkeys(problems))


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation but - and _ dropped, spaces to -."""
    anchors = set()
    in_block = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_block = not in_block
        elif not in_block and line.startswith("#"):
            title = line.lstrip("#").strip().replace("`", "")
            anchors.add(re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-"))
    return anchors


def link_problems(path: Path) -> list[str]:
    markdown = path.read_text()
    problems = []
    for target in LINK.findall(markdown):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked.read_text()):
            problems.append(f"{target}: no such heading in {linked.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("doc", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_name_only_commands_flags_metrics_and_paths_that_exist(doc: Path, names: Names) -> None:
    problems = check_text(doc.read_text(), names)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(doc: Path) -> None:
    problems = link_problems(doc)
    assert not problems, "\n".join(problems)


def test_the_checker_finds_a_flag_no_command_has(names: Names) -> None:
    """A bogus flag after a real subcommand is found, in a code block and in a code span; one
    that is a global flag, or that follows a bare `--` (another command's), is not."""
    assert check_text("```\n$ gpuobsctl kernels --bogus\n```\n", names) == [
        "gpuobsctl kernels --bogus: not a flag of kernels"
    ]
    assert check_text("Run `gpuobsctl kernels --top 5 --bogus` to see.", names) == [
        "gpuobsctl kernels --bogus: not a flag of kernels"
    ]
    assert check_text("`gpuobsctl --output json kernels --top 5 --pid 1`", names) == []
    assert check_text("`gpuobsctl run --mode blocks -- python x.py --epochs 3`", names) == []


def test_the_checker_finds_a_subcommand_gpuobsd_synth_flag_metric_or_path_that_does_not_exist(names: Names) -> None:
    assert check_text("`gpuobsctl kernals --top 5`", names) == ["gpuobsctl kernals: no such subcommand"]
    assert check_text("```\ngpuobsctl --bogus status\n```", names) == [
        "gpuobsctl --bogus: not a global flag (before the subcommand)"
    ]
    assert check_text("```\ngpuobsd --runtime-dir /tmp/g \\\n  --drain-speed 3\n```", names) == [
        "gpuobsd --drain-speed: not a flag of gpuobsd"
    ]
    assert check_text("`gpuobs-synth --mode blocks --warp-size 32`", names) == [
        "gpuobs-synth --warp-size: not a flag of gpuobs-synth"
    ]
    assert check_text("watch `gpuobs_events_lost_total` and gpuobs_events_total.", names) == [
        "gpuobs_events_lost_total: not a metric of docs/metrics.md (nor a name of the injector's code)"
    ]
    assert check_text("`tests/gpu/no_such_test.py`", names) == [
        "tests/gpu/no_such_test.py: no such file or folder in the repository"
    ]


def test_the_checker_leaves_prose_and_real_names_alone(names: Names) -> None:
    text = """
gpuobsctl users in the gpuobs group may switch modes; `gpuobsctl` exits 0; `gpuobsctl COMMAND --help`.
A mistyped subcommand (`stauts`) gets the nearest one. `gpuobsd.service`, `/run/gpuobs/gpuobsd.sock`.
`gpuobsctl source --pid 4242 --top 10 --kernel reshape | head --lines 3` and
`journalctl -u gpuobsd | grep drain_stalled`; `libgpuobs_injector.so`, `gpuobs_patches.fatbin`,
`gpuobs_record_step`, `gpu:gpuobs_block_seconds:rate5m`, `gpuobs_request_device_seconds_count{rank="0"}`,
`gpuobs_process_info`, `tests/support/gpuobs_testing/`, `bench/results/overhead-decode-DATE-COMMIT.json`.

```
$ gpuobsctl status
gpuobsctl: permission denied on /run/gpuobs: ...
source <(gpuobsctl completion bash)
.venv/bin/gpuobsd --runtime-dir $w/run --segment-dir $w/segments \\
  --log-format console 2> $w/gpuobsd.log &
```
"""
    assert check_text(text, names) == []
