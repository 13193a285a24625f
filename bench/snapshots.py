"""What a workspace snapshot costs per tool call (runs.snapshots), with and without the digest
cache, measured on a generated workspace.

Run by hand:

    uv run python -m bench.snapshots                      # 1,000 files, 100 MB
    uv run python -m bench.snapshots --files 200 --mb 20  # smaller

With several worker hosts a snapshot follows every tool call: its manifest lists every file with
its sha256. Rows (each the worst of three tries, milliseconds of wall time and of this process's
CPU):

* cold: a process that never saw the workspace hashes every file, read from disk (a run's first
  call on a host, its files not in the page cache);
* no digest cache: every file hashed, from the page cache (what every call cost before the cache);
* unchanged: the manifest of the same, unchanged workspace (most calls: a read, a search);
* one file changed: one file rewritten since the last call (a write);
* snapshot, unchanged: `snapshot_take` as a call makes it, nothing to upload (local store).

Files are made more than runs.snapshots.RACY_NS before they are measured, as a workspace's
files are between two calls; a file changed within that time is hashed again on purpose.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _setup_django(data_dir: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["MOTOR_DATA_DIR"] = str(data_dir)
    os.environ.setdefault("SECRET_KEY", "bench")
    os.environ.setdefault("DEBUG", "true")
    import django

    django.setup()


def _cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000


def _worst_of(
    tries: int, prepare: Callable[[], None], action: Callable[[], None]
) -> tuple[float, float]:
    """(wall ms, CPU ms) of `action`, the worst of `tries` (each after `prepare`)."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(tries):
        prepare()
        cpu, wall = _cpu_ms(), time.perf_counter()
        action()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append(_cpu_ms() - cpu)
    return max(walls), max(cpus)


def _drop_page_cache(workspace: Path) -> None:
    """Ask the kernel to forget the files' pages (so "cold" reads them from disk when it can)."""
    for directory, _dirs, files in os.walk(workspace):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="motor-bench-snapshots-"))
    _setup_django(scratch / "data")
    from runs import snapshots

    workspace = scratch / "ws"
    size = args.mb * 1024 * 1024 // args.files
    for index in range(args.files):
        target = workspace / f"dir{index % 20:02d}" / f"file{index:05d}.bin"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(os.urandom(size))
    time.sleep(snapshots.RACY_NS / 1e9 + 0.2)  # as between two calls

    def forget_digests() -> None:
        snapshots._digests = snapshots._DigestCache()

    def forget() -> None:
        forget_digests()
        _drop_page_cache(workspace)

    def manifest() -> None:
        snapshots.workspace_manifest(workspace)

    rows: list[tuple[str, float, float]] = []
    rows.append(
        ("cold: every file read from disk and hashed", *_worst_of(args.tries, forget, manifest))
    )
    manifest()  # the files in the page cache again
    rows.append(
        (
            "no digest cache (every call before it)",
            *_worst_of(args.tries, forget_digests, manifest),
        )
    )
    manifest()  # the cache as a call leaves it
    rows.append(("unchanged workspace", *_worst_of(args.tries, lambda: None, manifest)))
    changed = workspace / "dir00" / "file00000.bin"

    def rewrite() -> None:
        changed.write_bytes(os.urandom(size))

    rows.append(("one file changed", *_worst_of(args.tries, rewrite, manifest)))
    previous = snapshots.workspace_manifest(workspace)
    with_store = scratch / "store"
    store = snapshots.LocalStore(with_store)
    snapshots.snapshot_take(workspace, run_id="bench", seq=1, previous={}, store=store)
    previous = snapshots.workspace_manifest(workspace)
    time.sleep(snapshots.RACY_NS / 1e9 + 0.2)
    rows.append(
        (
            "snapshot_take, unchanged (local store)",
            *_worst_of(
                args.tries,
                lambda: None,
                lambda: snapshots.snapshot_take(
                    workspace, run_id="bench", seq=2, previous=previous, store=store
                ),
            ),
        )
    )

    print(f"workspace: {args.files} files, {args.mb} MB; worst of {args.tries}")
    print(f"{'per call':<44}  {'wall ms':>9}  {'CPU ms':>9}")
    print(f"{'-' * 44}  {'-' * 9}  {'-' * 9}")
    for name, wall, cpu in rows:
        print(f"{name:<44}  {wall:9.1f}  {cpu:9.1f}")


if __name__ == "__main__":
    main()
