"""gpuobsctl deploy: the packaged deployment files listed, printed as they would be written, and
installed under a temporary --root (never the machine's /etc: every install here names a root)
safely: exclusive creation, explicit modes, a differing file refused without --force and
replaced atomically with it, a symbolic link never followed, --dry-run writing nothing, and the
CLI's conventions (usage errors exit 2 with the valid names, failures exit 1 in one line)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import gpuobs
import pytest
from gpuobs.client.commands import deploy
from gpuobs.client.main import main

DEFAULTS = {
    "gpuobsd.service": "etc/systemd/system/gpuobsd.service",
    "vllm-gpuobs.conf": "etc/systemd/system/vllm.service.d/gpuobs.conf",
}


@pytest.fixture(autouse=True)
def strict_umask() -> Iterator[None]:
    """A umask that would leave the files 0600 and the folders 0700: the modes must be set, not
    left to it."""
    before = os.umask(0o077)
    yield
    os.umask(before)


def gpuobsctl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Runs gpuobsctl in this process: its exit status (a usage error's too), stdout, stderr."""
    assert "install" not in args or "--root" in args, "an install in a test names a --root"
    try:
        status = main(list(args))
    except SystemExit as done:
        status = int(done.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def install(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str, str]:
    return gpuobsctl(capsys, "deploy", "install", "--root", str(root), *args)


def packaged(name: str) -> bytes:
    return (deploy.deploy_folder() / deploy.BY_NAME[name].source).read_bytes()


def tree(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under root: its mode, and a file's bytes."""
    found: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[str(path.relative_to(root))] = (info.st_mode, content)
    return found


def test_list_names_every_file_and_where_it_installs(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = gpuobsctl(capsys, "deploy", "list", "--output", "json")
    assert status == 0
    listed = json.loads(out)
    assert listed["folder"] == str(Path(gpuobs.__file__).parent / "deploy")
    files = {entry["name"]: entry for entry in listed["files"]}
    assert list(files) == [file.name for file in deploy.FILES]
    for entry in files.values():
        assert Path(entry["path"]).is_file(), entry
    assert {name for name, entry in files.items() if entry["default"]} == set(DEFAULTS)
    assert files["gpuobsd.service"]["target"] == "/etc/systemd/system/gpuobsd.service"
    assert files["vllm-gpuobs.conf"]["target"] == "/etc/systemd/system/vllm.service.d/gpuobs.conf"
    assert files["provisioning/datasources/gpuobs.yml"]["target"] == "/etc/grafana/provisioning/datasources/gpuobs.yml"
    assert {name for name, entry in files.items() if entry["target"] is None} == {
        "gpuobs-rules.test.yml",
        "gpuobs-scrape.yml",
        "gpuobs.yaml",
    }

    status, out, _ = gpuobsctl(capsys, "deploy", "list", "--vllm-unit", "vllm-qwen", "--root", "/srv/stage")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"packaged in {deploy.deploy_folder()}; operator guide: ")
    assert lines[1].split() == ["NAME", "DEFAULT", "INSTALLS", "TO", "WHAT"]
    row = next(line.split() for line in lines if line.startswith("vllm-gpuobs.conf "))
    assert row[1:3] == ["yes", "/srv/stage/etc/systemd/system/vllm-qwen.service.d/gpuobs.conf"]
    row = next(line.split() for line in lines if line.startswith("gpuobs.yaml "))
    assert row[1:4] == ["no", "print", "only"]


def test_print_gives_the_file_as_install_writes_it(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("gpuobs.yaml", "gpuobs.json", "gpuobs-rules.yml", "vllm-gpuobs.conf"):
        status, out, _ = gpuobsctl(capsys, "deploy", "print", name)
        assert status == 0 and out.encode() == packaged(name), name
    status, out, _ = gpuobsctl(capsys, "deploy", "print", "gpuobsd.service")
    assert status == 0
    documentation = deploy.documentation()
    assert documentation is not None and documentation.exists()
    shipped = packaged("gpuobsd.service").decode().splitlines()
    printed = out.splitlines()
    assert len(printed) == len(shipped)
    differ = [(a, b) for a, b in zip(shipped, printed) if a != b]
    assert differ == [
        ("Documentation=file:///opt/gpuobs/docs/operator-guide.md", f"Documentation={documentation.as_uri()}")
    ]


def test_documentation_names_the_installed_operator_guide(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The guide where the package has it, else the installed docs folder (a package built
    before the guide existed); a path with % escaped for systemd (%% is a literal %)."""
    guide = tmp_path / "50% docs" / "operator-guide.md"
    guide.parent.mkdir()
    guide.write_text("# gpuobs operator guide\n")
    monkeypatch.setattr(deploy, "operator_guide", lambda: guide)
    status, out, _ = gpuobsctl(capsys, "deploy", "print", "gpuobsd.service")
    assert status == 0
    assert f"\nDocumentation=file://{tmp_path}/50%%25%%20docs/operator-guide.md\n" in out
    monkeypatch.setattr(deploy, "operator_guide", lambda: None)
    status, out, _ = gpuobsctl(capsys, "deploy", "print", "gpuobsd.service")
    assert status == 0 and f"\nDocumentation={(Path(gpuobs.__file__).parent / 'docs').as_uri()}\n" in out


def test_install_writes_the_systemd_files_with_their_modes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = install(capsys, tmp_path)
    assert status == 0, err
    assert out.splitlines() == [f"installed     {tmp_path / target}" for target in DEFAULTS.values()]
    assert "next:" not in out  # under a --root, systemctl is not what comes next
    for name, target in DEFAULTS.items():
        path = tmp_path / target
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        _, printed, _ = gpuobsctl(capsys, "deploy", "print", name)
        assert path.read_text() == printed
    for folder in ("etc", "etc/systemd", "etc/systemd/system", "etc/systemd/system/vllm.service.d"):
        assert stat.S_IMODE((tmp_path / folder).stat().st_mode) == 0o755, folder
    assert sorted(p.name for p in (tmp_path / "etc/systemd/system").iterdir()) == ["gpuobsd.service", "vllm.service.d"]


def test_install_of_named_files_and_another_vllm_unit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = install(
        capsys,
        tmp_path,
        "vllm-gpuobs.conf",
        "gpuobs-rules.yml",
        "gpuobs.json",
        "--vllm-unit",
        "vllm@",
        "--output",
        "json",
    )
    assert status == 0, err
    written = json.loads(out)
    assert written["dry_run"] is False and written["next"] == []
    assert [(f["name"], f["action"]) for f in written["files"]] == [
        ("vllm-gpuobs.conf", "install"),
        ("gpuobs-rules.yml", "install"),
        ("gpuobs.json", "install"),
    ]
    assert (tmp_path / "etc/systemd/system/vllm@.service.d/gpuobs.conf").read_bytes() == packaged("vllm-gpuobs.conf")
    assert (tmp_path / "etc/prometheus/rules/gpuobs-rules.yml").read_bytes() == packaged("gpuobs-rules.yml")
    assert (tmp_path / "var/lib/grafana/dashboards/gpuobs/gpuobs.json").read_bytes() == packaged("gpuobs.json")
    assert not (tmp_path / "etc/systemd/system/gpuobsd.service").exists()


def test_an_existing_file_is_refused_without_force_and_replaced_with_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    unit = tmp_path / DEFAULTS["gpuobsd.service"]
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/usr/local/bin/gpuobsd --mine\n")
    os.chmod(unit, 0o600)
    before = unit.stat()
    status, out, err = install(capsys, tmp_path)
    assert status == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("gpuobsctl: nothing written: ") and f"{unit} exists and differs (--force replaces it)" in err
    assert unit.read_text() == "[Service]\nExecStart=/usr/local/bin/gpuobsd --mine\n"
    assert unit.stat().st_ino == before.st_ino and stat.S_IMODE(unit.stat().st_mode) == 0o600
    assert not (tmp_path / DEFAULTS["vllm-gpuobs.conf"]).exists()  # one refusal writes nothing

    status, out, err = install(capsys, tmp_path, "--force")
    assert status == 0, err
    assert out.splitlines() == [f"replaced      {unit}", f"installed     {tmp_path / DEFAULTS['vllm-gpuobs.conf']}"]
    _, printed, _ = gpuobsctl(capsys, "deploy", "print", "gpuobsd.service")
    assert unit.read_text() == printed
    assert unit.stat().st_ino != before.st_ino  # a new file renamed over the old one, not rewritten in place
    assert stat.S_IMODE(unit.stat().st_mode) == 0o644
    assert sorted(p.name for p in unit.parent.iterdir()) == ["gpuobsd.service", "vllm.service.d"]  # no temporary left

    again = unit.stat()
    status, out, err = install(capsys, tmp_path)  # what is there is what would be written
    assert status == 0, err
    assert out.splitlines() == [f"unchanged     {tmp_path / target}" for target in DEFAULTS.values()]
    assert unit.stat().st_ino == again.st_ino and unit.stat().st_mtime_ns == again.st_mtime_ns


@pytest.mark.parametrize("force", [False, True])
def test_a_symbolic_link_at_the_target_is_refused_and_not_followed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, force: bool
) -> None:
    root = tmp_path / "root"
    unit = root / DEFAULTS["gpuobsd.service"]
    unit.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.service"
    unit.symlink_to(elsewhere)  # dangling: following it would create the file there
    drop_in = root / DEFAULTS["vllm-gpuobs.conf"]
    drop_in.parent.mkdir()
    kept = tmp_path / "kept.conf"
    kept.write_text("someone else's\n")
    drop_in.symlink_to(kept)
    status, out, err = install(capsys, root, *(["--force"] if force else []))
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert f"{unit} is a symbolic link" in err and f"{drop_in} is a symbolic link" in err
    assert not elsewhere.exists() and kept.read_text() == "someone else's\n"
    assert unit.is_symlink() and drop_in.is_symlink() and os.readlink(unit) == str(elsewhere)


def test_a_parent_that_is_not_a_folder_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    systemd = tmp_path / "etc" / "systemd"
    systemd.mkdir(parents=True)
    (systemd / "system").symlink_to(tmp_path / "nowhere")  # a link to nothing: not made through
    status, _, err = install(capsys, tmp_path)
    assert status == 1 and f"{systemd / 'system'} is not a folder" in err
    assert not (tmp_path / "nowhere").exists()


def test_the_write_itself_never_follows_a_link(tmp_path: Path) -> None:
    """A link made after the check (a race) is not written through either: the exclusive,
    no-follow creation fails."""
    target = tmp_path / "gpuobsd.service"
    step = deploy.Step(deploy.BY_NAME["gpuobsd.service"], target, b"[Unit]\n", action="install")
    target.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        deploy.write(step)
    assert not (tmp_path / "elsewhere").exists() and target.is_symlink()


def test_dry_run_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = install(capsys, tmp_path, "--dry-run", "gpuobsd.service", "provisioning/dashboards/gpuobs.yml")
    assert status == 0, err
    assert out.splitlines() == [
        f"would install {tmp_path / DEFAULTS['gpuobsd.service']}",
        f"would install {tmp_path / 'etc/grafana/provisioning/dashboards/gpuobs.yml'}",
    ]
    assert list(tmp_path.iterdir()) == []
    unit = tmp_path / DEFAULTS["gpuobsd.service"]
    unit.parent.mkdir(parents=True)
    unit.write_text("mine\n")
    before = tree(tmp_path)
    status, _, err = install(capsys, tmp_path, "--dry-run")
    assert status == 1 and "exists and differs" in err  # what the install would refuse, said
    status, out, err = install(capsys, tmp_path, "--dry-run", "--force")
    assert status == 0 and out.splitlines()[0] == f"would replace {unit}", err
    assert tree(tmp_path) == before


def test_usage_errors_exit_2_with_the_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = install(capsys, tmp_path, "gpuobsd.srvice")
    assert status == 2
    message = err.splitlines()[-1]
    assert "invalid choice: 'gpuobsd.srvice' (choose from 'gpuobsd.service', 'vllm-gpuobs.conf'," in message
    assert message.endswith("did you mean 'gpuobsd.service'?")
    assert "'gpuobs.yaml'" not in message  # print only: not a choice of install
    status, _, err = gpuobsctl(capsys, "deploy", "print", "nothing-like-it")
    assert status == 2 and all(f"'{file.name}'" in err for file in deploy.FILES)
    status, _, err = install(capsys, tmp_path, "gpuobs.yaml")
    assert status == 2 and "gpuobs.yaml is print only: `gpuobsctl deploy print gpuobs.yaml`" in err
    status, _, err = gpuobsctl(capsys, "deploy", "lst")
    assert status == 2 and err.splitlines()[-1].endswith("did you mean 'list'?")
    for unit, reason in (("vllm.socket", "is not a .service unit"), ("../etc/x", "not a systemd unit name")):
        status, _, err = install(capsys, tmp_path, "--vllm-unit", unit)
        assert status == 2 and reason in err, err
    assert list(tmp_path.iterdir()) == []
    status, _, err = install(capsys, tmp_path / "no-such-root")
    assert status == 1 and "no such folder" in err and not (tmp_path / "no-such-root").exists()


def test_installed_paths_are_this_installations(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the flag the shipped /opt/gpuobs paths stay (named on stderr where absent); with
    it, ExecStart runs this installation's gpuobsd and the drop-in injects its injector."""
    gpuobsd = Path(sysconfig.get_path("scripts")) / "gpuobsd"
    status, out, err = gpuobsctl(capsys, "deploy", "print", "gpuobsd.service")
    assert status == 0 and f"\nExecStart={deploy.SHIPPED_GPUOBSD} --runtime-dir " in out
    if not Path(deploy.SHIPPED_GPUOBSD).exists():
        assert f"note: the unit runs {deploy.SHIPPED_GPUOBSD}, absent here" in err
    status, out, err = gpuobsctl(capsys, "deploy", "print", "gpuobsd.service", "--installed-paths")
    assert status == 0 and f"\nExecStart={gpuobsd} --runtime-dir /run/gpuobs " in out and "absent here" not in err

    injector = tmp_path / "lib" / "libgpuobs_injector.so"
    injector.parent.mkdir()
    injector.write_bytes(b"\x7fELF")
    monkeypatch.setattr(gpuobs, "injector_library", lambda: injector)
    status, out, err = install(capsys, tmp_path, "vllm-gpuobs.conf", "--installed-paths")
    assert status == 0, err
    written = (tmp_path / DEFAULTS["vllm-gpuobs.conf"]).read_text()
    assert f"\nEnvironment=CUDA_INJECTION64_PATH={injector}\n" in written
    assert written.replace(str(injector), deploy.SHIPPED_INJECTOR).encode() == packaged("vllm-gpuobs.conf")

    monkeypatch.setattr(gpuobs, "injector_library", lambda: tmp_path / "none" / "libgpuobs_injector.so")
    status, _, err = gpuobsctl(capsys, "deploy", "print", "vllm-gpuobs.conf", "--installed-paths")
    assert status == 1 and err.count("\n") == 1 and "built without the injector" in err
    spaced = tmp_path / "a lib" / "libgpuobs_injector.so"
    spaced.parent.mkdir()
    spaced.write_bytes(b"\x7fELF")
    monkeypatch.setattr(gpuobs, "injector_library", lambda: spaced)
    status, _, err = gpuobsctl(capsys, "deploy", "print", "vllm-gpuobs.conf", "--installed-paths")
    assert status == 1 and "would need quoted" in err


def test_the_units_written_verify(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """systemd-analyze verify accepts the unit and the drop-in as install writes them with this
    installation's paths (the Documentation= it fills in among what it checks)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed")
    if not gpuobs.injector_library().is_file():
        pytest.skip("a build without the injector: --installed-paths has none to name")
    status, _, err = install(capsys, tmp_path, "--installed-paths", "--vllm-unit", "vllm")
    assert status == 0, err
    units = tmp_path / "etc/systemd/system"
    (units / "vllm.service").write_text("[Unit]\nDescription=vLLM\n[Service]\nExecStart=/bin/true\n")
    for unit in ("gpuobsd.service", "vllm.service"):
        done = subprocess.run(
            [tool, "verify", str(units / unit)],
            capture_output=True,
            text=True,
            env={"SYSTEMD_UNIT_PATH": f"{units}:", "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0 and (done.stdout + done.stderr).strip() == "", (unit, done.stdout, done.stderr)


def test_the_command_runs_as_a_program(tmp_path: Path) -> None:
    """Through the installed script, as an operator runs it: `print` into a pipe, `install`."""
    script = Path(sys.executable).parent / "gpuobsctl"
    printed = subprocess.run([str(script), "deploy", "print", "gpuobs.yaml"], capture_output=True, timeout=60)
    assert printed.returncode == 0 and printed.stdout == packaged("gpuobs.yaml") and printed.stderr == b""
    done = subprocess.run(
        [str(script), "deploy", "install", "--root", str(tmp_path), "gpuobs-rules.yml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "etc/prometheus/rules/gpuobs-rules.yml").read_bytes() == packaged("gpuobs-rules.yml")
