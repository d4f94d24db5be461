"""deploy/kubernetes and deploy/container: the manifests pass kubernetes-validate --strict (the
Kubernetes API's own schemas), the ServiceMonitor scrapes the Service that selects the DaemonSet's
pods on the port they open, and the daemon's flags in the manifest and in the image are flags
gpuobsd accepts."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from gpuobs_testing.daemon import gpuobsd_refuses

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFEST = DEPLOY / "kubernetes" / "gpuobs.yaml"


def documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def test_the_manifests_pass_the_kubernetes_schemas_strictly() -> None:
    tool = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run([str(tool), "--strict", str(MANIFEST)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for resource in ("namespace/gpuobs", "daemonset/gpuobsd", "service/gpuobsd"):
        assert f"passed for resource {resource}" in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_service_monitor_scrapes_the_daemonsets_metrics_port() -> None:
    docs = documents()
    pod = docs["DaemonSet"]["spec"]["template"]
    service, monitor = docs["Service"], docs["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    (container,) = pod["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        port = service_ports[endpoint["port"]]
        assert port["targetPort"] in container_ports
    args = container["args"]
    metrics = args[args.index("--metrics-address") + 1]
    assert metrics == f"0.0.0.0:{container_ports['metrics']}"  # listening where the Service sends


def test_the_daemons_flags_in_the_manifest_and_the_image_are_gpuobsds() -> None:
    (container,) = documents()["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    assert gpuobsd_refuses(container["args"]) == ""
    dockerfile = (DEPLOY / "container" / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    assert cmd is not None
    assert gpuobsd_refuses(yaml.safe_load(cmd.group(1))) == ""
    assert "unrecognized arguments" in gpuobsd_refuses(["--no-such-flag"])  # the check can fail
    assert gpuobsd_refuses(["--metrics-address", "nowhere"]) != ""


def test_the_injector_the_pods_are_told_to_load_is_the_one_the_image_ships() -> None:
    """The manifest's CUDA_INJECTION64_PATH for serving pods = the node folder the init container
    fills + the file the image puts in /opt/gpuobs/injector; segments where gpuobsd looks."""
    text = MANIFEST.read_text()
    docs = documents()
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (init,) = spec["initContainers"]
    copy = shlex.split(init["command"][-1])
    assert copy[:2] == ["cp", "/opt/gpuobs/injector/*"]  # the injector and what it loads from beside itself
    mounted = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    node_folder = volumes[mounted[copy[2].rstrip("/")]]["hostPath"]["path"]
    told = re.search(r"CUDA_INJECTION64_PATH=(\S+)", text).group(1)
    assert told == f"{node_folder}/libgpuobs_injector.so"
    dockerfile = (DEPLOY / "container" / "Dockerfile").read_text().replace("\\\n", " ")
    copied = re.search(
        r"cp ((?:/opt/gpuobs/venv/lib/python3\*/site-packages/gpuobs/lib/\S+\s+)+)/opt/gpuobs/injector/", dockerfile
    )
    assert copied, "the image copies the package's library folder into /opt/gpuobs/injector"
    names = {path.rsplit("/", 1)[1] for path in copied.group(1).split()}
    # the injector finds the sanitizer library and its patches beside itself (cmake/injector.cmake)
    assert names == {"libgpuobs_injector.so", "libsanitizer-public.so", "gpuobs_patches.fatbin"}
    (container,) = spec["containers"]
    segments = container["args"][container["args"].index("--segment-dir") + 1]
    assert f"GPUOBS_SEGMENT_DIR={segments}" in text
    assert volumes["segments"]["hostPath"]["path"] == segments  # the node's tmpfs, shared with the pods
