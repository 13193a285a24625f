"""The sandbox image: the registry-free local build and the production Dockerfile agree.

Both build paths read sandbox/image/packages.txt (Chromium among them), install the browser
driver with browser.sh and run sandbox/image/finalize.sh, and both set the same user, working
directory and PATH. The static tests parse the two recipes; the others
check the image that build.sh actually produced on this machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import docker
import pytest

from sandbox.backends.docker import DEFAULT_IMAGE as BACKEND_DEFAULT_IMAGE
from sandbox.backends.docker import SANDBOX_UID

IMAGE_DIR = Path(__file__).resolve().parents[2] / "sandbox" / "image"
BUILD_SH = IMAGE_DIR / "build.sh"
DOCKERFILE = IMAGE_DIR / "Dockerfile"
#: the image build.sh produced here (the one the docker backend uses)
DEFAULT_IMAGE = os.environ.get("SANDBOX_DOCKER_IMAGE") or BACKEND_DEFAULT_IMAGE
UV_LOCK = IMAGE_DIR.parents[1] / "uv.lock"


def packages() -> list[str]:
    lines = (IMAGE_DIR / "packages.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def build_sh_changes() -> dict[str, str]:
    """The `docker import --change 'KEY value'` instructions of build.sh."""
    found = re.findall(r"--change '(\w+) ([^']+)'", BUILD_SH.read_text())
    return {key: value for key, value in found}


def dockerfile_instructions() -> dict[str, str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.strip().partition(" ")
            found.setdefault(key, value.strip())
    return found


def test_both_recipes_install_the_shared_package_list_and_run_the_same_finalisation() -> None:
    # given the two recipes
    build_sh = BUILD_SH.read_text()
    instructions = dockerfile_instructions()
    # then both take the packages from packages.txt and finalise with finalize.sh
    assert '"$here/packages.txt"' in build_sh
    # (debootstrap lays down minbase; apt inside the rootfs installs the list, alternatives
    # and all, as the Dockerfile's apt does)
    assert 'debootstrap --variant=minbase "$suite"' in build_sh
    assert 'apt-get install -y --no-install-recommends $(echo "$packages"' in build_sh
    assert "--include=" not in build_sh
    assert 'chroot "$work/rootfs" /bin/sh /finalize.sh' in build_sh
    assert " ".join(instructions["COPY"].split()) == (
        "sandbox/image/packages.txt sandbox/image/finalize.sh sandbox/image/runtime.sh "
        "sandbox/image/runtime-requirements.txt sandbox/image/browser.sh "
        "sandbox/image/browser-requirements.txt /tmp/image/"
    )
    assert "apt-get install -y --no-install-recommends" in instructions["RUN"]
    assert "/tmp/image/packages.txt" in instructions["RUN"]
    assert "sh /tmp/image/finalize.sh" in instructions["RUN"]
    # and both install the skill runtime from the one pinned file, at the same path
    assert "sh /tmp/image/runtime.sh /opt/motor-cortex-runtime" in instructions["RUN"]
    assert (
        'cp "$here/runtime.sh" "$here/runtime-requirements.txt" "$here/browser.sh" '
        '"$here/browser-requirements.txt" "$work/rootfs/tmp/image/"'
    ) in " ".join(build_sh.replace("\\\n", " ").split())
    assert "/bin/sh /tmp/image/runtime.sh /opt/motor-cortex-runtime" in build_sh
    # and the browser driver from its pinned file, and Chromium's managed policy
    assert "sh /tmp/image/browser.sh /opt/motor-cortex-browser" in instructions["RUN"]
    assert "/bin/sh /tmp/image/browser.sh /opt/motor-cortex-browser" in build_sh
    assert (
        "COPY sandbox/browser_policy.json /etc/chromium/policies/managed/motor-cortex.json"
        in DOCKERFILE.read_text()
    )
    assert '"$work/rootfs/etc/chromium/policies/managed/motor-cortex.json"' in build_sh
    # and the list holds what the code tool and the default bash allowlist need, the
    # virtualenv module the runtime is built with, and node and npm for npm dependencies
    assert packages() == [
        "python3",
        "python3-venv",
        "python3-pip",
        "nodejs",
        "npm",
        "curl",
        "jq",
        "ca-certificates",
        "coreutils",
        "grep",
        "chromium",
        "fonts-liberation",
        "libatomic1",
    ]


def test_the_image_pins_the_playwright_the_worker_runs() -> None:
    # given the browser driver's pins and the project's lock file
    pins = dict(
        line.split("==")
        for line in (IMAGE_DIR / "browser-requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    lock = UV_LOCK.read_text()
    # then each is the version uv.lock gives the worker (the same driver on both backends)
    assert set(pins) == {"playwright", "greenlet"}
    for name, version in pins.items():
        assert f'name = "{name}"\nversion = "{version}"\n' in lock, (name, version)


def test_both_recipes_set_the_same_user_workdir_and_path() -> None:
    # given the image settings of each recipe
    changes = build_sh_changes()
    instructions = dockerfile_instructions()
    # then user, working directory and environment are identical, and the uid is the backend's
    assert changes["USER"] == instructions["USER"] == f"{SANDBOX_UID}:{SANDBOX_UID}"
    assert changes["WORKDIR"] == instructions["WORKDIR"] == "/workspace"
    assert changes["ENV"] == instructions["ENV"]
    assert changes["CMD"] == instructions["CMD"]
    assert instructions["ARG"] == "BASE_IMAGE=debian:bookworm-slim"
    assert instructions["FROM"] == "${BASE_IMAGE}"
    assert "suite=bookworm" in BUILD_SH.read_text()
    finalize = (IMAGE_DIR / "finalize.sh").read_text()
    assert f"SANDBOX_UID={SANDBOX_UID}\n" in finalize


def image_facts(client: docker.DockerClient, image: str) -> list[str]:
    """What an image holds, seen from inside: package states, the sandbox user, the uid it runs
    as, owner and mode of the mount points, setuid/setgid files, leftover docs."""
    output = client.containers.run(
        image,
        [
            "sh",
            "-c",
            "dpkg-query -W -f '${Package} ${Status}\\n' " + " ".join(packages()) + " | sort; "
            "getent passwd sandbox; id -u; pwd; stat -c '%u %a' /workspace /opt/motor-cortex "
            "/run/motor-cortex; find / -xdev -perm /6000 -type f | wc -l; ls /usr/share/doc | wc -l; "
            'python3 -I -c \'import sys; sys.path.insert(0, "/opt/motor-cortex-browser"); '
            'from playwright._repo_version import version; print("playwright", version)\'; '
            "python3 -c 'import json; print(sorted(json.load(open("
            '"/etc/chromium/policies/managed/motor-cortex.json")))[:2])\'',
        ],
        network_mode="none",
        remove=True,
    )
    return bytes(output).decode().splitlines()


EXPECTED_FACTS = [
    *sorted(f"{p} install ok installed" for p in packages()),
    "sandbox:x:10001:10001::/workspace:/usr/sbin/nologin",
    "10001",
    "/workspace",
    "10001 755",
    "0 755",
    "0 755",
    "0",
    "0",
    "playwright 1.65.2",
    "['AutofillAddressEnabled', 'AutofillCreditCardEnabled']",
]


@pytest.mark.docker
def test_local_image_carries_the_listed_packages_and_the_sandbox_user() -> None:
    # given the image build.sh produced
    client = docker.from_env()
    image = client.images.get(DEFAULT_IMAGE)
    # when its configuration and contents are inspected
    facts = image_facts(client, DEFAULT_IMAGE)
    # then every listed package is installed, the user is 10001 with no login shell, the mount
    # points exist, nothing is setuid and the docs were stripped
    assert facts == EXPECTED_FACTS
    assert image.attrs["Config"]["User"] == f"{SANDBOX_UID}:{SANDBOX_UID}"
    assert image.labels["motor-cortex.inputs"]


@pytest.mark.docker
@pytest.mark.slow
def test_production_dockerfile_builds_an_equivalent_image(tmp_path: Path) -> None:
    # given a Debian bookworm base available without a registry (the local image, back to root:
    # its apt lists are stripped, so the Dockerfile's own apt-get update/install really runs)
    client = docker.from_env()
    tag = f"motor-cortex-dockerfile-test:{os.getpid()}"
    base = f"motor-cortex-dockerfile-base:{os.getpid()}"
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "Dockerfile").write_text(f"FROM {DEFAULT_IMAGE}\nUSER 0\n")
    context = tmp_path / "context"
    (context / "sandbox" / "image").mkdir(parents=True)
    for name in (
        "Dockerfile",
        "packages.txt",
        "finalize.sh",
        "runtime.sh",
        "runtime-requirements.txt",
        "browser.sh",
        "browser-requirements.txt",
    ):
        shutil.copy(IMAGE_DIR / name, context / "sandbox" / "image" / name)
    shutil.copy(
        IMAGE_DIR.parent / "browser_policy.json", context / "sandbox" / "browser_policy.json"
    )
    try:
        client.images.build(path=str(tmp_path / "base"), tag=base, rm=True)
        # when the production Dockerfile is built on it, as docker compose does
        client.images.build(
            path=str(context),
            dockerfile="sandbox/image/Dockerfile",
            buildargs={"BASE_IMAGE": base},
            tag=tag,
            rm=True,
        )
        # then the result holds exactly what the locally built image holds
        assert image_facts(client, tag) == EXPECTED_FACTS
        assert client.images.get(tag).attrs["Config"]["User"] == f"{SANDBOX_UID}:{SANDBOX_UID}"
    finally:
        for name in (tag, base):
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(name, force=True)


@pytest.mark.docker
def test_build_is_idempotent_when_the_inputs_are_unchanged() -> None:
    # given the current image
    client = docker.from_env()
    before = client.images.get(DEFAULT_IMAGE).id
    # when build.sh runs again
    done = subprocess.run([str(BUILD_SH)], capture_output=True, text=True, timeout=600)
    # then it recognises the image by its input hash and leaves it alone
    assert done.returncode == 0, done.stderr
    assert "is up to date" in done.stderr
    assert client.images.get(DEFAULT_IMAGE).id == before


def test_build_fails_loudly_without_an_engine(tmp_path: Path) -> None:
    # given an environment whose Docker host does not exist
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    # when build.sh runs
    done = subprocess.run([str(BUILD_SH)], capture_output=True, text=True, env=env, timeout=60)
    # then it exits non-zero naming the problem, and built nothing
    assert done.returncode == 1
    assert "ERROR: no Docker engine answers" in done.stderr
    assert not list(tmp_path.iterdir())
