"""The installed package carries the deployment files and the documentation (CMakeLists.txt
installs them as package data): the same bytes as the repository's, and exactly the files
`gpuobsctl deploy` knows, so a file added to deploy/ gets a place in its table."""

from __future__ import annotations

from pathlib import Path

import gpuobs
from gpuobs.client.commands import deploy

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = Path(gpuobs.__file__).parent
PACKAGED_FOLDERS = ("systemd", "prometheus", "grafana", "kubernetes")  # deploy/container and README stay out


def files_under(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}


def test_the_package_carries_the_deployment_files() -> None:
    repository = {
        f"{top}/{name}"
        for top in PACKAGED_FOLDERS
        for name in files_under(ROOT / "deploy" / top)
        if "__pycache__" not in name
    }
    installed = files_under(INSTALLED / "deploy")
    assert installed == repository
    assert installed == {file.source for file in deploy.FILES}
    for name in installed:
        assert (INSTALLED / "deploy" / name).read_bytes() == (ROOT / "deploy" / name).read_bytes(), name
    assert deploy.deploy_folder() == INSTALLED / "deploy"


def test_the_package_carries_the_documentation() -> None:
    """Every docs/*.md (the operator guide among them once it is written: the unit's
    Documentation= names it), byte for byte."""
    repository = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert files_under(INSTALLED / "docs") == repository
    for name in repository:
        assert (INSTALLED / "docs" / name).read_bytes() == (ROOT / "docs" / name).read_bytes(), name
    guide_in_repository = (ROOT / "docs" / "operator-guide.md").is_file()
    assert (deploy.operator_guide() is not None) == guide_in_repository
