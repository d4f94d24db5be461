"""gpuobsctl deploy: the deployment files this package carries (package data under gpuobs/deploy,
the same files as the repository's deploy/), listed, printed, or installed where the system reads
them, so that a host set up from a wheel needs no checkout of the repository.

  gpuobsctl deploy list                  each file, whether `install` writes it by default, where
  gpuobsctl deploy print NAME            one file to stdout: `gpuobsctl deploy print gpuobsd.service | sudo tee ...`
  gpuobsctl deploy install [NAME ...]    into the system's places; without NAME the two systemd files

Where `install` writes (every target under --root DIR when it is given: a package's staging
folder, a test's temporary one):

  gpuobsd.service                        /etc/systemd/system/gpuobsd.service                    (default)
  vllm-gpuobs.conf                       /etc/systemd/system/UNIT.d/gpuobs.conf                 (default)
  gpuobs-rules.yml                       /etc/prometheus/rules/gpuobs-rules.yml                 (named)
  gpuobs.json                            /var/lib/grafana/dashboards/gpuobs/gpuobs.json         (named)
  provisioning/dashboards/gpuobs.yml     /etc/grafana/provisioning/dashboards/gpuobs.yml        (named)
  provisioning/datasources/gpuobs.yml    /etc/grafana/provisioning/datasources/gpuobs.yml       (named)

UNIT is the vLLM service the drop-in joins: --vllm-unit UNIT (default vllm.service; a name
without a suffix gets .service, a template such as vllm@.service reaches every instance). Only
the systemd files are written by default: they are gpuobs's own, on the host it observes, while
Prometheus and Grafana often run elsewhere and their files change another service's settings, so
those are written only when named (then: rule_files: in prometheus.yml; the datasource's url is
127.0.0.1:9090, point it at yours). Three files are print only, being parts of another file or
meant for another machine: gpuobs-scrape.yml (a job for prometheus.yml's scrape_configs, or a
file for its scrape_config_files), gpuobs-rules.test.yml (`promtool test rules` on the path
`list` shows) and gpuobs.yaml (`gpuobsctl deploy print gpuobs.yaml | kubectl apply -f -`).

What is written differs from the packaged file in two ways, both shown by `print` too:
- the unit's Documentation= names this installation's operator guide (gpuobs/docs/
  operator-guide.md, or the docs folder in a package built without it: where it is depends on
  the environment and the Python version);
- with --installed-paths, the paths the shipped files fix for the documented layout
  (/opt/gpuobs/venv/bin/gpuobsd in ExecStart=, /opt/gpuobs/lib/libgpuobs_injector.so in the
  drop-in, a link that deploy/README.md makes) are this installation's instead: its gpuobsd and
  its injector (`gpuobsctl injector-path`). Not the default: the link survives a new Python
  version, a path into site-packages does not (install again with --force after an upgrade).
  Without it, a shipped path missing on this machine is named on stderr.

Installing is safe against what is already there: a new file is created exclusively
(O_CREAT|O_EXCL|O_NOFOLLOW), a symbolic link at a target is refused and never followed (with
--force too), an existing file that differs is refused without --force and replaced atomically
with it (a temporary file in the same folder, synced, renamed over it), an identical one is left
as it is. Every target is checked before anything is written: one refusal writes nothing.
Missing folders are made 0755, files are 0644. --dry-run checks and says, and writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import secrets
import stat
import sys
import sysconfig
from collections.abc import Callable, Sequence
from pathlib import Path

import gpuobs

from ..connection import CommandError, UsageError
from ..output import emit

NAME = "deploy"
HELP = "list, print or install the deployment files (systemd unit, vLLM drop-in, Prometheus, Grafana, Kubernetes)"
EXAMPLES = """examples:
  gpuobsctl deploy list
  gpuobsctl deploy print vllm-gpuobs.conf
  gpuobsctl deploy install --dry-run                       # the unit and the drop-in for vllm.service
  gpuobsctl deploy install --vllm-unit vllm-qwen --installed-paths
  gpuobsctl deploy install --root /tmp/pkgroot gpuobsd.service gpuobs-rules.yml"""

DEFAULT_VLLM_UNIT = "vllm.service"
UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\-]+")
FILE_MODE = 0o644
FOLDER_MODE = 0o755
# The paths the shipped files fix (deploy/README.md's layout), which --installed-paths replaces.
SHIPPED_GPUOBSD = "/opt/gpuobs/venv/bin/gpuobsd"
SHIPPED_INJECTOR = "/opt/gpuobs/lib/libgpuobs_injector.so"
# Characters a path may not hold to be written bare into a unit file: systemd splits ExecStart=
# at whitespace, takes quotes and backslashes as quoting and $ as a variable (% is escaped as %%).
UNIT_UNSAFE = re.compile(r"[\s\"'\\$\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True)
class DeployFile:
    """One packaged file: its NAME on the command line, its path under gpuobs/deploy, where
    `install` writes it ("{unit}" is the vLLM unit; None: print only), whether `install` without
    names writes it, and what to do with it (list's note)."""

    name: str
    source: str
    target: str | None
    default: bool
    note: str


FILES = (
    DeployFile(
        "gpuobsd.service",
        "systemd/gpuobsd.service",
        "/etc/systemd/system/gpuobsd.service",
        True,
        "the daemon's unit",
    ),
    DeployFile(
        "vllm-gpuobs.conf",
        "systemd/vllm-gpuobs.conf",
        "/etc/systemd/system/{unit}.d/gpuobs.conf",
        True,
        "drop-in that injects gpuobs into the vLLM unit (--vllm-unit)",
    ),
    DeployFile(
        "gpuobs-rules.yml",
        "prometheus/gpuobs-rules.yml",
        "/etc/prometheus/rules/gpuobs-rules.yml",
        False,
        "recording rules and alerts: list under rule_files: of prometheus.yml",
    ),
    DeployFile(
        "gpuobs-rules.test.yml",
        "prometheus/gpuobs-rules.test.yml",
        None,
        False,
        "the rules' unit tests: promtool test rules on the packaged file",
    ),
    DeployFile(
        "gpuobs-scrape.yml",
        "prometheus/gpuobs-scrape.yml",
        None,
        False,
        "a job for scrape_configs: of prometheus.yml (or a scrape_config_files: file)",
    ),
    DeployFile(
        "gpuobs.json",
        "grafana/dashboards/gpuobs.json",
        "/var/lib/grafana/dashboards/gpuobs/gpuobs.json",
        False,
        "the Grafana dashboard (the dashboards provisioning file loads it)",
    ),
    DeployFile(
        "provisioning/dashboards/gpuobs.yml",
        "grafana/provisioning/dashboards/gpuobs.yml",
        "/etc/grafana/provisioning/dashboards/gpuobs.yml",
        False,
        "loads the dashboard folder into Grafana",
    ),
    DeployFile(
        "provisioning/datasources/gpuobs.yml",
        "grafana/provisioning/datasources/gpuobs.yml",
        "/etc/grafana/provisioning/datasources/gpuobs.yml",
        False,
        "the Prometheus data source (url 127.0.0.1:9090: point it at yours)",
    ),
    DeployFile(
        "gpuobs.yaml",
        "kubernetes/gpuobs.yaml",
        None,
        False,
        "DaemonSet, Service and ServiceMonitor of the cluster: print it into kubectl apply -f -",
    ),
)
BY_NAME = {file.name: file for file in FILES}


def deploy_folder() -> Path:
    """Where this installation's deployment files are (package data, gpuobs/deploy)."""
    return Path(gpuobs.__file__).parent / "deploy"


def operator_guide() -> Path | None:
    """This installation's operator guide (gpuobs/docs/operator-guide.md), the unit's
    Documentation=; None in a package built without it."""
    guide = Path(gpuobs.__file__).parent / "docs" / "operator-guide.md"
    return guide if guide.is_file() else None


def documentation() -> Path | None:
    """What the unit's Documentation= names: the operator guide, else the installed docs folder
    (a package built before the guide existed), else nothing installed (None)."""
    folder = Path(gpuobs.__file__).parent / "docs"
    return operator_guide() or (folder if folder.is_dir() else None)


def deploy_name(installable: bool) -> Callable[[str], DeployFile]:
    """NAME's argument type: a known file (one `install` can write, where `installable`), else a
    usage error in argparse's own words, which main's did-you-mean reads."""

    def parse(text: str) -> DeployFile:
        names = [file.name for file in FILES if file.target is not None or not installable]
        found = BY_NAME.get(text)
        if found is not None and found.target is None and installable:
            raise argparse.ArgumentTypeError(f"{text} is print only: `gpuobsctl deploy print {text}` ({found.note})")
        if found is None:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {text!r} (choose from {', '.join(repr(name) for name in names)})"
            )
        return found

    parse.__name__ = "NAME"
    return parse


def vllm_unit(text: str) -> str:
    """--vllm-unit's type: a service unit's name (.service added where no suffix is given);
    the drop-in's settings are a [Service] section's."""
    unit = text if "." in text.rsplit("@", 1)[-1] else f"{text}.service"
    if not UNIT_NAME.fullmatch(unit) or len(unit) > 255 or unit.startswith("."):
        raise argparse.ArgumentTypeError(f"not a systemd unit name: {text[:80]!r}")
    if not unit.endswith(".service"):
        raise argparse.ArgumentTypeError(f"{unit} is not a .service unit: the drop-in holds [Service] settings")
    return unit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..main import add_global_flags  # here, not at the top: main imports the commands

    actions = parser.add_subparsers(dest="deploy_action", required=True, metavar="{list,print,install}")

    def targets_flags(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--vllm-unit",
            metavar="UNIT",
            type=vllm_unit,
            default=DEFAULT_VLLM_UNIT,
            help=f"the vLLM service the drop-in joins (UNIT.d/gpuobs.conf) [default {DEFAULT_VLLM_UNIT}]",
        )
        sub.add_argument("--root", metavar="DIR", help="put every target under this existing folder (packaging, tests)")

    def paths_flag(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--installed-paths",
            action="store_true",
            help=f"write this installation's gpuobsd and injector in place of the shipped {SHIPPED_GPUOBSD} "
            f"and {SHIPPED_INJECTOR} (not the default: that /opt/gpuobs/lib link outlives a Python upgrade)",
        )

    listing = actions.add_parser("list", help="each file, and where install writes it")
    targets_flags(listing)
    printing = actions.add_parser("print", help="one file to stdout, as install would write it")
    printing.add_argument("file", metavar="NAME", type=deploy_name(installable=False), help="a file (see list)")
    paths_flag(printing)
    installing = actions.add_parser(
        "install",
        help="write files where the system reads them (default: the systemd unit and drop-in)",
        description="Writes the named files (without NAME: gpuobsd.service and vllm-gpuobs.conf) where the "
        "system reads them; `gpuobsctl deploy list` shows where. Print-only files are refused.",
    )
    installing.add_argument(
        "files", metavar="NAME", nargs="*", type=deploy_name(installable=True), help="files to write (see list)"
    )
    targets_flags(installing)
    paths_flag(installing)
    installing.add_argument("--force", action="store_true", help="replace existing files that differ (atomically)")
    installing.add_argument("--dry-run", action="store_true", help="check and say what would be done; write nothing")
    for sub in (listing, printing, installing):
        add_global_flags(sub, defaults=False)


def target_of(file: DeployFile, unit: str, root: Path | None) -> Path | None:
    if file.target is None:
        return None
    target = Path(file.target.format(unit=unit))
    return root / target.relative_to("/") if root is not None else target


def unit_value(text: str, what: str) -> str:
    """A path or URI as a unit file may hold it bare: % escaped as systemd's %%, anything that
    would need quoting refused (a path with it is for the user to quote by hand)."""
    if UNIT_UNSAFE.search(text):
        raise CommandError(f"{what} {text!r} holds a character a unit file would need quoted; write the unit by hand")
    return text.replace("%", "%%")


def installed_gpuobsd() -> Path:
    """This installation's gpuobsd: the console script beside this Python's, or in the user
    scheme's scripts folder for a `pip install --user`."""
    folders = [sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")]
    for folder in folders:
        candidate = Path(folder) / "gpuobsd"
        if candidate.is_file():
            return candidate
    raise CommandError(f"cannot find this installation's gpuobsd (looked in {', '.join(folders)})")


def installed_injector() -> Path:
    library = gpuobs.injector_library()
    if not library.is_file():
        raise CommandError(
            f"{library} is missing: this gpuobs was built without the injector, so --installed-paths has no "
            f"injector to name in the drop-in; rebuild where the CUDA toolkit is installed"
        )
    return library


def replace_line(text: str, pattern: str, replacement: Callable[[re.Match[str]], str], source: str) -> str:
    """`text` with the one line `pattern` matches rewritten; a packaged file without that line is
    a broken package (the tests keep the two in step)."""
    rewritten, count = re.subn(pattern, replacement, text, count=1, flags=re.MULTILINE)
    if count != 1:
        raise CommandError(f"the packaged {source} has no line matching {pattern!r}: the package is broken")
    return rewritten


def say_notes(notes: Sequence[str]) -> None:
    """Notes on what was written, on stderr after it (a failure's one line stays the only one)."""
    for line in dict.fromkeys(notes):
        print(f"gpuobsctl: note: {line}", file=sys.stderr)


def rendered(file: DeployFile, installed_paths: bool, notes: list[str]) -> bytes:
    """The file as `print` shows it and `install` writes it (the module's docstring says how it
    differs from the packaged one); what the user should know about it goes into `notes`."""
    path = deploy_folder() / file.source
    try:
        text = path.read_text()
    except OSError as error:
        raise CommandError(f"cannot read the packaged {file.source}: {error.strerror} ({path})") from None
    if file.name == "gpuobsd.service":
        docs = documentation()
        if docs is None:
            notes.append("this installation has no gpuobs/docs: the unit's Documentation= is the packaged one")
        else:
            uri = unit_value(docs.as_uri(), "the documentation's URI")
            text = replace_line(text, r"^Documentation=.*$", lambda _: f"Documentation={uri}", file.source)
        if installed_paths:
            gpuobsd = unit_value(str(installed_gpuobsd()), "gpuobsd's path")
            text = replace_line(text, r"^(ExecStart=)(\S+)", lambda m: m.group(1) + gpuobsd, file.source)
        elif not Path(SHIPPED_GPUOBSD).exists():
            notes.append(f"the unit runs {SHIPPED_GPUOBSD}, absent here: --installed-paths writes this installation's")
    if file.name == "vllm-gpuobs.conf":
        if installed_paths:
            injector = unit_value(str(installed_injector()), "the injector's path")
            text = replace_line(
                text, r"^(Environment=CUDA_INJECTION64_PATH=).*$", lambda m: m.group(1) + injector, file.source
            )
        elif not Path(SHIPPED_INJECTOR).exists():
            notes.append(
                f"the drop-in injects {SHIPPED_INJECTOR}, absent here: link /opt/gpuobs/lib to the folder of "
                f"`gpuobsctl injector-path`, or give --installed-paths"
            )
    return text.encode()


@dataclasses.dataclass
class Step:
    """One file of an install: where it goes, its bytes, and what is done there ("install",
    "replace", "unchanged"), or why not (`refused`)."""

    file: DeployFile
    target: Path
    content: bytes
    action: str = ""
    refused: str = ""


def plan(step: Step, force: bool) -> None:
    """Decides the step's action from what is at its target now (the link itself, never what it
    points at)."""
    for parent in reversed(step.target.parents):
        if os.path.lexists(parent) and not parent.is_dir():  # a file, or a link to nothing
            step.refused = f"{parent} is not a folder"
            return
    try:
        found = os.lstat(step.target)
    except FileNotFoundError:
        step.action = "install"
        return
    except OSError as error:
        step.refused = f"{step.target}: {error.strerror}"
        return
    if stat.S_ISLNK(found.st_mode):
        step.refused = f"{step.target} is a symbolic link (not followed, not replaced: remove it first)"
    elif not stat.S_ISREG(found.st_mode):
        step.refused = f"{step.target} is not a regular file"
    elif same_content(step.target, step.content):
        step.action = "unchanged"
    elif force:
        step.action = "replace"
    else:
        step.refused = f"{step.target} exists and differs (--force replaces it)"


def same_content(path: Path, content: bytes) -> bool:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(descriptor, "rb") as existing:
        return existing.read(len(content) + 1) == content


def make_folders(folder: Path) -> None:
    """The missing folders down to `folder`, each 0755 whatever the umask."""
    missing = [parent for parent in [folder, *folder.parents] if not parent.exists()]
    for parent in reversed(missing):
        try:
            parent.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            if not parent.is_dir():
                raise
            continue
        descriptor = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(descriptor, FOLDER_MODE)
        finally:
            os.close(descriptor)


def write_all(descriptor: int, content: bytes) -> None:
    os.fchmod(descriptor, FILE_MODE)
    view = memoryview(content)
    while view:
        view = view[os.write(descriptor, view) :]
    os.fsync(descriptor)


def write(step: Step) -> None:
    """Carries out one planned step in the target's folder, through a descriptor of that folder:
    a new file created exclusively, or an existing one replaced by a synced temporary file
    renamed over it. Neither follows a link at the target."""
    make_folders(step.target.parent)
    folder = os.open(step.target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name = step.target.name
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        written = f".{name}.gpuobs-{secrets.token_hex(6)}" if step.action == "replace" else name
        descriptor = os.open(written, flags, FILE_MODE, dir_fd=folder)
        try:
            write_all(descriptor, step.content)
        except BaseException:
            os.unlink(written, dir_fd=folder)
            raise
        finally:
            os.close(descriptor)
        if step.action == "replace":
            try:
                if stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode):  # made since the plan: not ours to replace
                    raise CommandError(f"{step.target} became a symbolic link: not replaced")
                os.replace(written, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                os.unlink(written, dir_fd=folder)
                raise
        os.fsync(folder)
    finally:
        os.close(folder)


def next_steps(steps: Sequence[Step], unit: str) -> list[str]:
    """What to run after an install on this system, for the files it wrote."""
    written = {step.file.name for step in steps if step.action in ("install", "replace")}
    lines = []
    if written & {"gpuobsd.service", "vllm-gpuobs.conf"}:
        lines.append("systemctl daemon-reload")
    if "gpuobsd.service" in written:
        lines.append("systemctl enable --now gpuobsd.service")
    if "vllm-gpuobs.conf" in written:
        lines.append(f"systemctl restart {unit}  # its processes load the injector when they start")
    if "gpuobs-rules.yml" in written:
        lines.append("add /etc/prometheus/rules/gpuobs-rules.yml to rule_files: of prometheus.yml; reload Prometheus")
    if written & {"gpuobs.json", "provisioning/dashboards/gpuobs.yml", "provisioning/datasources/gpuobs.yml"}:
        lines.append("systemctl restart grafana-server")
    return lines


def root_folder(text: str | None) -> Path | None:
    if text is None:
        return None
    root = Path(text).absolute()
    if not root.is_dir():
        raise CommandError(f"--root {text}: no such folder (it is not made: a typo would install elsewhere)")
    return root


def run_list(args: argparse.Namespace) -> int:
    root = Path(args.root).absolute() if args.root else None  # shown, not written: need not exist yet
    files = []
    for file in FILES:
        target = target_of(file, args.vllm_unit, root)
        files.append(
            {
                "name": file.name,
                "default": file.default,
                "target": str(target) if target else None,
                "note": file.note,
                "path": str(deploy_folder() / file.source),
            }
        )
    guide = operator_guide()
    if args.output == "json":
        emit("json", {"folder": str(deploy_folder()), "operator_guide": str(guide) if guide else None, "files": files})
        return 0
    print(f"packaged in {deploy_folder()}; operator guide: {guide or 'not in this installation'}")
    rows = [{**f, "default": "yes" if f["default"] else "no", "target": f["target"] or "print only"} for f in files]
    emit("table", {}, [("name", "NAME"), ("default", "DEFAULT"), ("target", "INSTALLS TO"), ("note", "WHAT")], rows)
    return 0


def run_print(args: argparse.Namespace) -> int:
    if args.output == "json":
        raise UsageError("deploy print writes the file itself; it has no JSON form (deploy list has)")
    notes: list[str] = []
    sys.stdout.buffer.write(rendered(args.file, args.installed_paths, notes))
    sys.stdout.flush()
    say_notes(notes)
    return 0


def run_install(args: argparse.Namespace) -> int:
    root = root_folder(args.root)
    chosen = list(dict.fromkeys(args.files)) or [file for file in FILES if file.default]
    steps = []
    notes: list[str] = []
    for file in chosen:
        target = target_of(file, args.vllm_unit, root)
        assert target is not None  # deploy_name(installable=True) let only such files through
        steps.append(Step(file, target, rendered(file, args.installed_paths, notes)))
    for step in steps:
        plan(step, args.force)
    refused = [step.refused for step in steps if step.refused]
    if refused:
        raise CommandError(f"nothing written: {'; '.join(refused)}")
    done: list[Step] = []
    if not args.dry_run:
        for step in steps:
            if step.action == "unchanged":
                continue
            try:
                write(step)
            except FileExistsError:
                raise CommandError(f"{step.target} appeared meanwhile; not replaced{written_before(done)}") from None
            except OSError as error:
                hint = " (run as root, or give --root DIR)" if isinstance(error, PermissionError) else ""
                raise CommandError(
                    f"cannot write {step.target}: {error.strerror}{hint}{written_before(done)}"
                ) from None
            done.append(step)
    later = next_steps(steps, args.vllm_unit) if root is None and not args.dry_run else []
    if args.output == "json":
        files = [{"name": s.file.name, "target": str(s.target), "action": s.action} for s in steps]
        emit("json", {"dry_run": args.dry_run, "files": files, "next": later})
    else:
        verbs = {"install": "installed", "replace": "replaced", "unchanged": "unchanged"}
        for step in steps:
            verb = f"would {step.action}" if args.dry_run and step.action != "unchanged" else verbs[step.action]
            print(f"{verb:<13} {step.target}")
        for line in later:
            print(f"next: {line}")
    say_notes(notes)
    return 0


def written_before(done: Sequence[Step]) -> str:
    return f"; written before it: {', '.join(str(step.target) for step in done)}" if done else ""


def run(args: argparse.Namespace) -> int:
    actions = {"list": run_list, "print": run_print, "install": run_install}
    return actions[args.deploy_action](args)
