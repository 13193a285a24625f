"""The writable-mount rule as the backends check it before starting anything
(sandbox/backends/mounts.py); the sessions' own mounts are checked from inside in
tests/sandbox/test_writable_mounts.py."""

from __future__ import annotations

import pytest
from docker.types import Mount

from sandbox.backends.mounts import check_bwrap_args, check_docker_mounts
from sandbox.types import SandboxError

# the options of a sound list, one group per option; the command and its arguments follow
SOUND_OPTIONS = [
    ["--unshare-all"],
    ["--setenv", "HOME", "/workspace"],
    ["--dev", "/dev"],
    ["--size", "16777216"],
    ["--tmpfs", "/dev/shm"],
    ["--remount-ro", "/dev"],
    ["--size", "4096"],
    ["--tmpfs", "/tmp"],
    ["--bind", "/srv/ws", "/workspace"],
    ["--ro-bind", "/run/x/net", "/run/motor-cortex"],
    ["--remount-ro", "/"],
]
COMMAND = ["/usr/bin/python3", "--bind", "/", "/anything"]


def bwrap_args(options: list[list[str]]) -> list[str]:
    return ["/usr/bin/bwrap", *(token for group in options for token in group), *COMMAND]


def test_a_sound_bwrap_argument_list_passes() -> None:
    # given the workspace bind, sized tmpfs mounts and read-only remounts (and a command whose
    # own arguments look like options), when checked, then nothing is raised
    check_bwrap_args(bwrap_args(SOUND_OPTIONS))


@pytest.mark.parametrize(
    ("drop", "add", "message"),
    [
        (None, ["--bind", "/run/x/net", "/run/motor-cortex"], "writable bind mount at /run/motor"),
        (["--size", "16777216"], None, "tmpfs /dev/shm has no --size"),
        (["--remount-ro", "/"], None, "^/ must be remounted read-only"),
        (["--remount-ro", "/dev"], None, "^/dev must be remounted read-only"),
        (None, ["--bind-data", "3", "/etc/x"], "--bind-data is not classified"),
        (None, ["--bind", "/srv/ws", "/workspace/"], "bound read-write more than once"),
        (None, ["--uid"], "--uid is missing its value"),
    ],
    ids=["rw-bind", "unsized-tmpfs", "root-rw", "dev-rw", "unknown", "two-workspaces", "short"],
)
def test_a_bwrap_argument_list_breaking_the_rule_is_refused(
    drop: list[str] | None, add: list[str] | None, message: str
) -> None:
    # given a sound list with one option dropped or one added at the end
    options = [group for group in SOUND_OPTIONS if group != drop] + ([add] if add else [])
    args = bwrap_args(options)
    if add == ["--uid"]:
        args = args[: -len(COMMAND)]
    # when checked, then the refusal names the offending mount or option
    with pytest.raises(SandboxError, match=message):
        check_bwrap_args(args)


def test_sound_docker_mounts_pass() -> None:
    mounts = [
        Mount("/workspace", "/srv/ws", type="bind", read_only=False),
        Mount("/run/motor-cortex", "/run/x", type="bind", read_only=True),
    ]
    check_docker_mounts(mounts=mounts, tmpfs={"/tmp": "rw,size=4096"}, read_only_root=True)


@pytest.mark.parametrize(
    ("mounts", "tmpfs", "read_only_root", "message"),
    [
        (
            [Mount("/run/motor-cortex", "/run/x", type="bind", read_only=False)],
            {},
            True,
            "writable mount at /run/motor-cortex",
        ),
        ([], {"/tmp": "rw,mode=1777"}, True, "tmpfs /tmp has no size="),
        ([], {}, False, "root filesystem must be read-only"),
    ],
    ids=["rw-bind", "unsized-tmpfs", "root-rw"],
)
def test_docker_mounts_breaking_the_rule_are_refused(
    mounts: list[Mount], tmpfs: dict[str, str], read_only_root: bool, message: str
) -> None:
    with pytest.raises(SandboxError, match=message):
        check_docker_mounts(mounts=mounts, tmpfs=tmpfs, read_only_root=read_only_root)
