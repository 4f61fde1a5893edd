"""Build Pagoda's serving images: `make images` (and `make images-push REGISTRY=...`).

    python3 images/build.py [engine] [operator] [--builder auto|docker|buildah]
    python3 images/build.py --push REGISTRY [--tls-verify=false]
    python3 images/build.py --print-inputs engine      # the inputs' hash (see below)

With a Docker engine (`docker info` answers) the Dockerfiles build with `docker build`
on their default `debian:bookworm-slim` base. Without one, as on our development and CI
machines, they build with buildah (chroot isolation) on a base root filesystem that
mmdebstrap makes from Debian's packages: the packages each Dockerfile's first stage lists
in its `packages="..."`, so that stage finds them installed. The base is cached by that
list (a tarball in Pagoda's cache), and buildah keeps every layer, so a code change
rebuilds only the last one.

Every image is tagged `<repository>:<version>` (the names the chart and the operator
default to) and `<repository>:<version>-<commit>`, and labelled with the OCI labels and
`dev.pagoda.inputs`: a hash of everything the build reads (Dockerfile, source files,
constraints, the base's package list, this script). An image whose label matches the
checkout's hash is not rebuilt; the e2e tests refuse an image whose label does not match
(a stale image), and `.cache/images/built.json` records each image's id and hash.

Standard library only: this runs before any virtual environment exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("images")

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "images"
REGISTRY = "ghcr.io/pagoda-serving"
NAMES = ("engine", "operator")
# What the Dockerfiles COPY from the repository root (.dockerignore drops bytecode).
SOURCES = ("pyproject.toml", "constraints.txt", "README.md", "pagoda", "engine", "operator")
INPUTS_LABEL = "dev.pagoda.inputs"
RECORD = ROOT / ".cache" / "images" / "built.json"
CONTAINERS_CONF = IMAGES / "containers.conf"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRRORS = (
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main",
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main",
)
# minbase (essential packages and apt), no documentation, manuals or translations
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    '--aptopt=APT::Install-Recommends "false"',
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
)
# pip inside a build reaches PyPI the way this machine does: its configuration and CA
# bundle, mounted read-only for the build's RUN steps only
HOST_PIP_FILES = ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt")


class BuildError(RuntimeError):
    """A build step failed; the message says which and what to do."""


@dataclass(frozen=True)
class Image:
    name: str  # engine | operator

    @property
    def dockerfile(self) -> Path:
        return IMAGES / self.name / "Dockerfile"

    @property
    def repository(self) -> str:
        return f"{REGISTRY}/pagoda-{self.name}"

    def base_packages(self) -> list[str]:
        """The OS packages the Dockerfile's first stage installs (its `packages="..."`)."""
        match = re.search(r'packages="([^"]+)"', self.dockerfile.read_text())
        if match is None:
            raise BuildError(f'{self.dockerfile}: no packages="..." line in its first stage')
        return sorted(match[1].split())

    def base_key(self) -> str:
        spec = [*self.base_packages(), *DEBIAN_MIRRORS, *MMDEBSTRAP_OPTIONS]
        return hashlib.sha256("\n".join(spec).encode()).hexdigest()[:16]

    def inputs_hash(self) -> str:
        digest = hashlib.sha256()
        digest.update(self.base_key().encode())
        build_files = [self.dockerfile, IMAGES / "build.py", ROOT / ".dockerignore"]
        for path in [*build_files, *source_files()]:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        return digest.hexdigest()[:24]

    def current_tag(self) -> str:
        """The tag the chart runs, once the store holds it built from this checkout."""
        tag = tags(self)[0]
        info = inspect(tag)
        if info is None:
            raise BuildError(f"{tag} is not built: run `make images`")
        built, wanted = image_labels(info).get(INPUTS_LABEL), self.inputs_hash()
        if built != wanted:
            raise BuildError(
                f"{tag} is stale (built from inputs {built}, this checkout's are {wanted}): "
                "run `make images`"
            )
        return tag


def source_files() -> list[Path]:
    """The files the Dockerfiles COPY: tracked or untracked-but-not-ignored, as git sees
    them (bytecode and caches are ignored by .gitignore and .dockerignore alike)."""
    listed = _run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *SOURCES],
        capture=True,
    ).stdout
    files = [ROOT / name for name in listed.split("\0") if name]
    return sorted(f for f in files if f.is_file())  # a deleted, uncommitted file is gone


def version() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.MULTILINE)[1]


def revision() -> str:
    commit = _run(["git", "rev-parse", "--short=12", "HEAD"], capture=True).stdout.strip()
    dirty = _run(["git", "status", "--porcelain", "--", *SOURCES], capture=True).stdout.strip()
    return f"{commit}-dirty" if dirty else commit


def tags(image: Image) -> list[str]:
    return [f"{image.repository}:{version()}", f"{image.repository}:{version()}-{revision()}"]


# -- builders -------------------------------------------------------------------------------


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def podman_env() -> dict[str, str]:
    """podman and buildah with runc and cgroupfs (this machine has no systemd session)."""
    return os.environ | {"CONTAINERS_CONF": str(CONTAINERS_CONF)}


def build_with_docker(image: Image, inputs: str) -> None:
    command = ["docker", "build", "-f", str(image.dockerfile)]
    command += [a for tag in tags(image) for a in ("-t", tag)]
    command += [a for label in labels(inputs) for a in ("--label", label)]
    _run([*command, str(ROOT)], env=os.environ | {"DOCKER_BUILDKIT": "1"})


def missing_tools(builder: str) -> list[str]:
    wanted = ["docker"] if builder == "docker" else ["buildah", "podman", "mmdebstrap"]
    return [tool for tool in wanted if shutil.which(tool) is None]


def build_with_buildah(image: Image, inputs: str) -> None:
    if missing := missing_tools("buildah"):
        raise BuildError(f"{', '.join(missing)} missing: run `make image-tools`")
    base = ensure_base(image)
    command = ["buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers"]
    command += ["-f", str(image.dockerfile), "--build-arg", f"BASE_IMAGE={base}"]
    command += [f"--volume={f}:{f}:ro" for f in HOST_PIP_FILES if Path(f).exists()]
    command += [a for tag in tags(image) for a in ("-t", tag)]
    command += [a for label in labels(inputs) for a in ("--label", label)]
    _run([*command, str(ROOT)], env=podman_env())


def ensure_base(image: Image) -> str:
    """localhost/pagoda-<name>-base:<key>, made by mmdebstrap once per package list."""
    name = f"localhost/pagoda-{image.name}-base:{image.base_key()}"
    if _image_exists(name):
        return name
    tarball = cache_dir() / f"pagoda-{image.name}-base-{image.base_key()}.tar"
    if not tarball.exists():
        log.info(
            "making the %s base with mmdebstrap (%s): about a minute",
            image.name,
            " ".join(image.base_packages()),
        )
        partial = tarball.with_suffix(".partial.tar")
        packages = "--include=" + ",".join(image.base_packages())
        _run(
            [
                "mmdebstrap",
                *MMDEBSTRAP_OPTIONS,
                packages,
                DEBIAN_SUITE,
                str(partial),
                *DEBIAN_MIRRORS,
            ]
        )
        partial.rename(tarball)
    _run(["podman", "import", "--quiet", str(tarball), name], env=podman_env(), capture=True)
    return name


def labels(inputs: str) -> list[str]:
    return [
        f"org.opencontainers.image.version={version()}",
        f"org.opencontainers.image.revision={revision()}",
        f"org.opencontainers.image.created={time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        f"{INPUTS_LABEL}={inputs}",
    ]


# -- the local store ------------------------------------------------------------------------


def store_command() -> list[str]:
    return ["docker"] if docker_available() else ["podman"]


def _image_exists(name: str) -> bool:
    result = subprocess.run(
        [*store_command(), "image", "exists" if "podman" in store_command() else "inspect", name],
        capture_output=True,
        env=podman_env(),
    )
    return result.returncode == 0


def inspect(name: str) -> dict | None:
    result = subprocess.run(
        [*store_command(), "image", "inspect", name],
        capture_output=True,
        text=True,
        env=podman_env(),
    )
    if result.returncode != 0:
        return None
    (info,) = json.loads(result.stdout)
    return info


def image_labels(info: dict) -> dict[str, str]:
    return (info.get("Config") or {}).get("Labels") or info.get("Labels") or {}


def build(image: Image, builder: str) -> dict:
    """Build the image unless the store holds one of the checkout's inputs; return its
    record (id, inputs, tags)."""
    inputs = image.inputs_hash()
    current = inspect(tags(image)[0])
    if current is not None and image_labels(current).get(INPUTS_LABEL) == inputs:
        log.info("%s: up to date (inputs %s), retagged", tags(image)[0], inputs)
        for tag in tags(image)[1:]:
            _run([*store_command(), "tag", current["Id"], tag], env=podman_env())
    else:
        started = time.monotonic()
        log.info("building %s (inputs %s) with %s", tags(image)[0], inputs, builder)
        (build_with_docker if builder == "docker" else build_with_buildah)(image, inputs)
        if image.inputs_hash() != inputs:  # its label would name sources it may not hold
            _run([*store_command(), "rmi", *tags(image)], env=podman_env(), capture=True)
            raise BuildError(f"the sources changed while {image.name} was built: build again")
        log.info("%s built in %.0f s", tags(image)[0], time.monotonic() - started)
        current = inspect(tags(image)[0])
    return {"id": current["Id"], "inputs": inputs, "tags": tags(image), "size": current.get("Size")}


def push(image: Image, registry: str, tls_verify: bool) -> None:
    for tag in tags(image):
        target = f"{registry.rstrip('/')}/{tag.rsplit('/', 1)[1]}"
        if "docker" in store_command():
            _run(["docker", "tag", tag, target])
            _run(["docker", "push", target])
        else:
            verify = f"--tls-verify={'true' if tls_verify else 'false'}"
            _run(["podman", "push", verify, tag, f"docker://{target}"], env=podman_env())
        log.info("pushed %s", target)


def cache_dir() -> Path:
    base = (
        os.environ.get("PAGODA_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pagoda"
    )
    path = Path(base) / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(command: list[str], env: dict | None = None, capture: bool = False):
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=capture, text=True)
    if result.returncode != 0:
        detail = (result.stderr or "")[-2000:] if capture else "(its output is above)"
        raise BuildError(f"`{' '.join(command[:3])} …` failed (exit {result.returncode}): {detail}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="images/build.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help="images to build: engine, operator (default: both)"
    )
    parser.add_argument(
        "--builder",
        choices=["auto", "docker", "buildah"],
        default="auto",
        help="docker when a Docker engine answers, else buildah",
    )
    parser.add_argument(
        "--push", metavar="REGISTRY", help="push the tags to REGISTRY (host[:port][/path])"
    )
    parser.add_argument(
        "--tls-verify",
        choices=["true", "false"],
        default="true",
        help="verify the registry's TLS certificate (default: true)",
    )
    parser.add_argument(
        "--if-possible",
        action="store_true",
        help="succeed, saying why, where neither docker nor buildah can build",
    )
    parser.add_argument(
        "--print-inputs", action="store_true", help="print each image's inputs hash and exit"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="images: %(message)s")
    if unknown := [name for name in args.names if name not in NAMES]:
        parser.error(f"unknown image {', '.join(unknown)}: choose from {', '.join(NAMES)}")
    images = [Image(name) for name in (args.names or NAMES)]
    try:
        if args.print_inputs:
            for image in images:
                print(image.name, image.inputs_hash())
            return 0
        if args.push:
            for image in images:
                push(image, args.push, args.tls_verify == "true")
            return 0
        builder = args.builder
        if builder == "auto":
            builder = "docker" if docker_available() else "buildah"
        if args.if_possible and (missing := missing_tools(builder)):
            log.warning(
                "not building the images (%s missing): the image tests will skip",
                ", ".join(missing),
            )
            return 0
        record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        for image in images:
            record[image.name] = build(image, builder)
            RECORD.parent.mkdir(parents=True, exist_ok=True)
            RECORD.write_text(json.dumps(record, indent=2) + "\n")
    except BuildError as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
