"""The serving images `make images` builds (images/build.py), run with podman: what they
are named and labelled, that they run as users expect (non-root, read-only root
filesystem, the entrypoints the chart and the operator's pods use), what they leave out,
and their size budgets (images/README.md). Skipped where podman is missing; a missing or
stale image fails, naming `make images`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from e2e.containers import podman, podman_missing
from images import build as images
from pagoda.operator.images import DEFAULT_ENGINE_IMAGE, DEFAULT_ROUTER_IMAGE

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pagoda"
MB = 10**6
# images/README.md states these budgets
OPERATOR_BUDGET_MB = 400
ENGINE_BESIDES_TORCH_BUDGET_MB = 1000
CODE_LAYER_BUDGET_MB = 20

needs_podman = pytest.mark.skipif(podman_missing() is not None, reason=str(podman_missing()))


def test_make_images_tags_what_the_chart_and_the_operator_run():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    engine, operator = images.Image("engine"), images.Image("operator")
    assert images.tags(engine)[0] == DEFAULT_ENGINE_IMAGE
    assert images.tags(operator)[0] == DEFAULT_ROUTER_IMAGE  # the router runs from it
    assert f"{values['engine']['image']['repository']}:{app_version}" == DEFAULT_ENGINE_IMAGE
    assert f"{values['operator']['image']['repository']}:{app_version}" == DEFAULT_ROUTER_IMAGE
    assert images.tags(engine)[1] == f"{DEFAULT_ENGINE_IMAGE}-{images.revision()}"
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?", images.revision())


def test_each_base_carries_only_what_its_image_needs():
    engine = images.Image("engine").base_packages()
    operator = images.Image("operator").base_packages()
    assert {"python3", "python3-venv", "ca-certificates"} <= set(operator)
    assert not {"gcc", "libc6-dev"} & set(operator)
    assert {"gcc", "libc6-dev", "libpython3-dev"} <= set(engine)  # Triton's launcher build
    assert images.Image("engine").base_key() != images.Image("operator").base_key()


def test_the_inputs_hash_covers_the_sources_and_not_bytecode():
    names = {str(p.relative_to(ROOT)) for p in images.source_files()}
    assert {"pyproject.toml", "constraints.txt", "pagoda/cli.py", "operator/cli.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith(("tests/", "e2e/", "bench/"))]


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    if reason := podman_missing():
        pytest.skip(reason)
    try:
        return {name: images.Image(name).current_tag() for name in images.NAMES}
    except images.BuildError as exc:
        pytest.fail(str(exc))


def run(image: str, *args: str, entrypoint: list[str] | None = None, check: bool = True):
    """The image as the chart runs it: read-only root, no capabilities, its own user."""
    flags = ["--rm", "--read-only", "--read-only-tmpfs=false", "--cap-drop=ALL"]
    flags += ["--security-opt=no-new-privileges", "--network=none", "--pull=never"]
    if entrypoint is not None:
        flags.append("--entrypoint=" + json.dumps(entrypoint))
    return podman("run", *flags, image, *args, check=check)


def shell(image: str, script: str) -> str:
    return run(image, "-c", script, entrypoint=["/bin/sh"]).stdout


@needs_podman
@pytest.mark.parametrize("name", images.NAMES)
def test_images_run_as_a_numeric_non_root_user_on_a_read_only_root(built, name):
    info = images.inspect(built[name])
    assert info["Config"]["User"] == "10001:10001"  # numeric: runAsNonRoot can verify it
    assert shell(built[name], "id -u; id -g").split() == ["10001", "10001"]
    written = run(built[name], "-c", "touch /opt/pagoda/x", entrypoint=["/bin/sh"], check=False)
    assert written.returncode != 0 and "Read-only file system" in written.stderr


@needs_podman
@pytest.mark.parametrize("name", images.NAMES)
def test_images_carry_the_oci_labels_and_this_checkouts_inputs(built, name):
    labels = images.image_labels(images.inspect(built[name]))
    assert labels["org.opencontainers.image.title"] == f"pagoda-{name}"
    assert labels["org.opencontainers.image.source"] == "https://github.com/pagoda-serving/pagoda"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.version"] == images.version()
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?", labels["org.opencontainers.image.revision"])
    assert labels[images.INPUTS_LABEL] == images.Image(name).inputs_hash()


@needs_podman
def test_the_engine_entrypoint_is_pagoda(built):
    assert images.inspect(built["engine"])["Config"]["Entrypoint"] == ["pagoda"]
    serve = run(built["engine"], "serve", "--help").stdout
    assert "--tensor-parallel-size" in serve and "--kv-cache-dtype" in serve
    # the engine's imports on a read-only root with no bytecode written
    imported = run(
        built["engine"], "-c", "import torch, triton, pagoda.engine.entrypoints.api_server",
        entrypoint=["python"],
    )  # fmt: skip
    assert imported.returncode == 0


@needs_podman
def test_the_operator_image_runs_the_operator_and_the_router(built):
    config = images.inspect(built["operator"])["Config"]
    assert config["Entrypoint"] == ["python", "-P", "-m", "pagoda.operator"]
    assert "--engine-image" in run(built["operator"], "--help").stdout
    router = ["python", "-P", "-m", "pagoda.operator.router"]  # the router pods' command
    assert "--inference-service" in run(built["operator"], "--help", entrypoint=router).stdout
    assert "torch" not in shell(built["operator"], "ls /opt/pagoda/lib/python3.11/site-packages")


# Generators run at development time (`make generate`, the dashboards), with dev extras.
DEV_ONLY = {
    "pagoda.operator.api.generate",
    "pagoda.operator.observability.dashboards",
    "pagoda.operator.observability.panels",
}
IMPORT_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
failed = {}
for module in pkgutil.walk_packages(package.__path__, sys.argv[1] + "."):
    if not module.name.endswith("__main__"):
        try:
            importlib.import_module(module.name)
        except Exception as exc:
            failed[module.name] = repr(exc)
print(json.dumps(failed))
"""


@needs_podman
@pytest.mark.parametrize(
    ("name", "package"), [("engine", "pagoda.engine"), ("operator", "pagoda.operator")]
)
def test_every_module_imports_with_the_images_dependencies(built, name, package):
    """The operator image installs its dependencies by name: one it misses fails here,
    not in a cluster."""
    out = run(built[name], "-c", IMPORT_ALL, package, entrypoint=["python"]).stdout
    failed = {module: why for module, why in json.loads(out).items() if module not in DEV_ONLY}
    assert not failed


@needs_podman
@pytest.mark.parametrize("name", images.NAMES)
def test_no_caches_package_lists_or_pip_in_the_final_image(built, name):
    leftovers = shell(
        built[name],
        "find /root/.cache /var/lib/apt/lists /var/cache/apt -type f ! -name lock 2>/dev/null; "
        "ls /opt/pagoda/bin | grep -x 'pip.*'; ls -d /src /tmp/installer 2>/dev/null; true",
    )
    assert leftovers.strip() == ""
    compilers = shell(built[name], "for c in make g++ c++ cc; do command -v $c; done; true").split()
    # Triton compiles its kernel launcher with a C compiler at run time: only `cc`
    assert compilers == (["/usr/bin/cc"] if name == "engine" else [])


def layer_sizes(image: str) -> list[int]:
    """Sizes of the image's layers, newest first (empty config-only steps left out)."""
    history = json.loads(podman("history", "--format", "json", image).stdout)
    return [entry["size"] for entry in history if entry["size"] > 0]


@needs_podman
@pytest.mark.parametrize("name", images.NAMES)
def test_pagodas_code_is_the_newest_layer_and_a_small_one(built, name):
    newest, *older = layer_sizes(built[name])
    assert newest < CODE_LAYER_BUDGET_MB * MB, f"the code layer is {newest / MB:.0f} MB"
    assert max(older) > newest  # the dependencies sit below it, rebuilt only when they change
    code = shell(built[name], "ls /opt/pagoda/lib/python3.11/site-packages | grep pagoda")
    assert "pagoda\n" in code and re.search(r"pagoda-[\d.]+\.dist-info", code)


@needs_podman
def test_size_budgets(built):
    operator = images.inspect(built["operator"])["Size"]
    assert operator < OPERATOR_BUDGET_MB * MB, f"operator image {operator / MB:.0f} MB"
    engine = images.inspect(built["engine"])["Size"]
    # torch's share: its wheel and the CUDA runtime wheels it pulls (nvidia-*, triton)
    torch_kb = shell(
        built["engine"],
        "cd /opt/pagoda/lib/python3.11/site-packages && du -sk torch nvidia triton | cut -f1",
    )
    torch_share = sum(int(kb) for kb in torch_kb.split()) * 1024
    besides = engine - torch_share
    assert besides < ENGINE_BESIDES_TORCH_BUDGET_MB * MB, (
        f"engine image {engine / MB:.0f} MB, {besides / MB:.0f} MB besides torch's "
        f"{torch_share / MB:.0f} MB"
    )
