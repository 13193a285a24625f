"""File tools (read, write, edit, list, glob, grep) run inside real bwrap and Docker sessions.

Confinement is shown on the host's bytes and inside the sandbox, not only by refusal messages.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.backends import get_backend
from sandbox.tools import execute_tool
from sandbox.types import ErrorCode, ExecRequest, Limits, Session, SessionSpec, ToolResult

OpenSession = Callable[[Path], Session]


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def open_session(request: pytest.FixtureRequest) -> Iterator[OpenSession]:
    """Sessions on each isolating backend; the file tools must behave the same on both."""
    sessions: list[Session] = []

    def factory(workspace: Path) -> Session:
        session = get_backend(str(request.param)).open(SessionSpec(workspace=workspace))
        sessions.append(session)
        return session

    yield factory
    for session in sessions:
        session.close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def run(session: Session, name: str, **args: object) -> ToolResult:
    return execute_tool(session, name, args, network_enabled=False)


def test_read_returns_the_file_text(ws: Path, open_session: OpenSession) -> None:
    # given a text file in the workspace
    (ws / "notes.txt").write_text("line one\nline two\n")
    session = open_session(ws)
    # when it is read
    result = run(session, "read", path="notes.txt")
    # then the text comes back as internal data
    assert (result.ok, result.output, result.provenance) == (
        True,
        "line one\nline two\n",
        "internal",
    )


def test_large_files_are_paged_by_lines(ws: Path, open_session: OpenSession) -> None:
    # given a 400 KB file of 10,000 numbered 40-byte lines
    lines = [f"{i:05d} " + "x" * 33 + "\n" for i in range(1, 10001)]
    (ws / "big.txt").write_text("".join(lines))
    session = open_session(ws)
    # when it is read whole, then from where the first page stopped
    first = run(session, "read", path="big.txt")
    # 256 KB / 40 bytes per line = 6553 whole lines fit
    second = run(session, "read", path="big.txt", offset=6554, limit=2)
    # then the first page is capped and says how to continue, the second continues there
    assert first.truncated is True
    assert first.output == "".join(lines[:6553]) + (
        "\n[showing lines 1-6553; more follow; continue with offset=6554]"
    )
    assert second.output == "".join(lines[6553:6555]) + (
        "\n[showing lines 6554-6555; more follow; continue with offset=6556]"
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../../etc/passwd", "../../etc/passwd: '..' is not allowed in paths"),
        ("sub/../../x", "sub/../../x: '..' is not allowed in paths"),
        (
            "/etc/passwd",
            "/etc/passwd: absolute paths must lie inside /workspace; use a relative path",
        ),
        ("/workspace/../etc/passwd", "/../etc/passwd: '..' is not allowed in paths"),
        (
            "/workspacex/a",
            "/workspacex/a: absolute paths must lie inside /workspace; use a relative path",
        ),
    ],
)
def test_paths_leaving_the_workspace_are_refused(
    ws: Path, open_session: OpenSession, path: str, message: str
) -> None:
    session = open_session(ws)
    # when a file tool is pointed outside the workspace
    read = run(session, "read", path=path)
    write = run(session, "write", path=path, content="owned")
    # then both are denied with the rule, and nothing was written anywhere in the sandbox
    assert (read.ok, read.error_code, read.output) == (False, ErrorCode.DENIED, message)
    assert (write.ok, write.error_code) == (False, ErrorCode.DENIED)
    probe = session.exec(
        ExecRequest(argv=["/usr/bin/python3", "-c", "import os;print(os.path.exists('/x'))"])
    )
    assert probe.stdout == b"False\n"
    assert sorted(os.listdir(ws)) == []


def test_absolute_paths_inside_the_workspace_work(ws: Path, open_session: OpenSession) -> None:
    session = open_session(ws)
    written = run(session, "write", path="/workspace/out/a.txt", content="abc")
    assert (written.ok, written.output) == (True, "wrote 3 bytes to out/a.txt")
    assert (ws / "out" / "a.txt").read_bytes() == b"abc"


def test_symlinks_leading_out_are_never_followed(ws: Path, open_session: OpenSession) -> None:
    # given a link to / and a link to /etc/passwd inside the workspace
    (ws / "root").symlink_to("/")
    (ws / "passwd").symlink_to("/etc/passwd")
    session = open_session(ws)
    # when file tools go through them
    via_dir = run(session, "read", path="root/etc/passwd")
    via_file = run(session, "read", path="passwd")
    write_dir = run(session, "write", path="root/tmp/planted", content="x")
    write_file = run(session, "write", path="passwd", content="x")
    grep = run(session, "grep", pattern="root")
    listing = run(session, "list")
    # then each is refused, the links are untouched and nothing landed behind them
    assert (via_dir.error_code, via_dir.output) == (
        ErrorCode.DENIED,
        "root: is a symbolic link; file tools never follow links",
    )
    assert (via_file.error_code, via_file.output) == (
        ErrorCode.DENIED,
        "passwd: is a symbolic link; file tools never follow links",
    )
    assert (write_dir.error_code, write_file.error_code) == (ErrorCode.DENIED, ErrorCode.DENIED)
    assert grep.output == "no matches for 'root'"
    assert listing.output == "link  passwd -> /etc/passwd\nlink  root -> /"
    assert os.readlink(ws / "passwd") == "/etc/passwd"
    planted = session.exec(
        ExecRequest(argv=["/usr/bin/python3", "-c", "import os;print(os.listdir('/tmp'))"])
    )
    assert planted.stdout == b"[]\n"


def test_a_directory_swapped_for_a_symlink_mid_call_never_leads_out(
    ws: Path, open_session: OpenSession
) -> None:
    # given a directory `d` holding secret.txt and write target, and a link target outside the
    # workspace (/tmp inside the sandbox) that holds a decoy with the same name
    (ws / "d").mkdir()
    (ws / "d" / "secret.txt").write_text("INSIDE")
    session = open_session(ws)
    decoy = "import pathlib; pathlib.Path('/tmp/secret.txt').write_text('OUTSIDE')"
    assert session.exec(ExecRequest(argv=["/usr/bin/python3", "-c", decoy])).exit_code == 0
    (ws / "link").symlink_to("/tmp")
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        # atomically exchange ws/d (the directory) and ws/link (a symlink to /tmp), over and
        # over: at any instant d is one or the other
        nonlocal swaps
        libc = ctypes.CDLL(None, use_errno=True)
        at_fdcwd, rename_exchange = -100, 2
        d, link = os.fsencode(ws / "d"), os.fsencode(ws / "link")
        while not stop.is_set():
            if libc.renameat2(at_fdcwd, d, at_fdcwd, link, rename_exchange) != 0:
                raise OSError(ctypes.get_errno(), "renameat2 failed")
            swaps += 1

    thread = threading.Thread(target=swapper)
    thread.start()
    try:
        # when reads and writes go through d/ while it is being swapped: at least 25 reads, and
        # on until both sides of the swap were met (on a loaded host the swapper thread may sit
        # descheduled on one side for many calls in a row)
        results = []
        while len(results) < 400 and (
            len(results) < 25 or {r.ok for r in results} != {True, False}
        ):
            results.append(run(session, "read", path="d/secret.txt"))
        writes = [run(session, "write", path="d/new.txt", content="w") for _ in range(25)]
    finally:
        stop.set()
        thread.join()
    # then every call either worked inside the workspace or was refused; none went through /tmp
    outcomes = {(r.ok, r.error_code, r.output) for r in results}
    assert outcomes <= {
        (True, None, "INSIDE"),
        (False, ErrorCode.DENIED, "d: is a symbolic link; file tools never follow links"),
    }
    assert {(w.ok, w.error_code) for w in writes} <= {(True, None), (False, ErrorCode.DENIED)}
    listing = session.exec(
        ExecRequest(argv=["/usr/bin/python3", "-c", "import os;print(sorted(os.listdir('/tmp')))"])
    )
    assert listing.stdout == b"['secret.txt']\n"
    # and the race really happened: both sides of the swap were met
    assert {r.ok for r in results} == {True, False}
    assert swaps > 0


def test_write_creates_parents_and_refuses_oversized_content(
    ws: Path, open_session: OpenSession
) -> None:
    session = open_session(ws)
    # when a nested file is written, and then a 1 MB + 1 byte file
    ok = run(session, "write", path="a/b/c.txt", content="héllo\n")
    big = run(session, "write", path="big.txt", content="x" * (1024 * 1024 + 1))
    # then the first lands byte-exact and the second is refused without creating anything
    assert (ok.ok, ok.output) == (True, "wrote 7 bytes to a/b/c.txt")
    assert (ws / "a" / "b" / "c.txt").read_bytes() == "héllo\n".encode()
    assert (big.ok, big.error_code, big.output) == (
        False,
        ErrorCode.TOO_LARGE,
        "write: content is 1048577 bytes; the limit is 1048576 bytes",
    )
    assert not (ws / "big.txt").exists()


def test_write_never_writes_credential_values(ws: Path, open_session: OpenSession) -> None:
    session = open_session(ws)
    result = execute_tool(
        session,
        "write",
        {"path": "cfg.txt", "content": "key=<credential:API_KEY>"},
        credentials={"API_KEY": "sk-live-123456"},
        network_enabled=False,
    )
    assert result.ok
    assert (ws / "cfg.txt").read_text() == "key=<credential:API_KEY>"


def test_edit_replaces_exactly_one_occurrence(ws: Path, open_session: OpenSession) -> None:
    (ws / "app.py").write_text("a = 1\nb = 2\n")
    os.chmod(ws / "app.py", 0o640)
    session = open_session(ws)
    result = run(session, "edit", path="app.py", old_string="b = 2", new_string="b = 3")
    assert (result.ok, result.output) == (True, "edited app.py: replaced 1 occurrence at line 2")
    assert (ws / "app.py").read_text() == "a = 1\nb = 3\n"
    assert (ws / "app.py").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize(
    ("old", "message"),
    [
        ("c = 9", "app.py: old_string was not found; read the file again"),
        (
            "= 1",
            "app.py: old_string occurs 2 times; include more surrounding text so it matches "
            "exactly once",
        ),
    ],
)
def test_edit_conflicts_leave_the_file_unchanged(
    ws: Path, open_session: OpenSession, old: str, message: str
) -> None:
    (ws / "app.py").write_text("a = 1\nb = 1\n")
    session = open_session(ws)
    result = run(session, "edit", path="app.py", old_string=old, new_string="z")
    assert (result.ok, result.error_code, result.output) == (False, ErrorCode.CONFLICT, message)
    assert (ws / "app.py").read_text() == "a = 1\nb = 1\n"
    assert sorted(os.listdir(ws)) == ["app.py"]


def test_invalid_arguments_are_named(ws: Path, open_session: OpenSession) -> None:
    session = open_session(ws)
    missing = execute_tool(session, "edit", {"path": "a"}, network_enabled=False)
    typed = execute_tool(session, "read", {"path": "a", "offset": "2"}, network_enabled=False)
    extra = execute_tool(session, "list", {"path": ".", "depth": 3}, network_enabled=False)
    assert (missing.error_code, missing.output) == (
        ErrorCode.INVALID_ARGS,
        "edit: missing required argument 'old_string'",
    )
    assert typed.output == "read: argument 'offset' must be an integer"
    assert extra.output == "list: unknown argument(s) depth; accepted: path"


def test_list_glob_and_grep(ws: Path, open_session: OpenSession) -> None:
    # given a small tree
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("import os\nprint('hi')\n")
    (ws / "src" / "pkg" / "util.py").write_text("def f():\n    return 'hi'\n")
    (ws / "README.md").write_text("Hi there\n")
    session = open_session(ws)
    # when listed, globbed and grepped
    listing = run(session, "list")
    py_files = run(session, "glob", pattern="**/*.py")
    top_md = run(session, "glob", pattern="*.md")
    hits = run(session, "grep", pattern="hi", glob="*.py")
    hits_ci = run(session, "grep", pattern="^hi", path="README.md", ignore_case=True)
    # then each answers from the workspace only
    assert listing.output == "file  README.md (9 bytes)\ndir   src/"
    assert py_files.output == "src/main.py\nsrc/pkg/util.py"
    assert top_md.output == "README.md"
    assert hits.output == "src/main.py:2: print('hi')\nsrc/pkg/util.py:2:     return 'hi'"
    assert hits_ci.output == "README.md:1: Hi there"


def test_grep_results_are_capped(ws: Path, open_session: OpenSession) -> None:
    (ws / "log.txt").write_text("".join(f"match {i}\n" for i in range(300)))
    session = open_session(ws)
    result = run(session, "grep", pattern="match")
    lines = result.output.split("\n")
    assert result.truncated is True
    assert len(lines) == 201
    assert lines[0] == "log.txt:1: match 0"
    assert lines[-1] == "[stopped at 200 matches]"


TOOLS_PY = "/opt/motor-cortex/tools.py"


def helper(session: Session, python: str, op: str, **args: object) -> tuple[int | None, bytes]:
    """Run the in-sandbox helper directly: with /usr/bin/python3 (the executors' exact argv, which
    the resident supervisor answers from a forked child of itself) or with a bare `python3`
    (never recognised: a fresh interpreter is exec'd)."""
    result = session.exec(
        ExecRequest(
            argv=[python, "-I", "-B", TOOLS_PY, op],
            stdin=json.dumps(args).encode(),
            timeout_s=20,
        )
    )
    return result.exit_code, result.stdout


def test_file_tools_answer_exactly_as_a_fresh_interpreter_would(
    ws: Path, open_session: OpenSession
) -> None:
    # given a small tree, a symlink leading out and a binary file
    (ws / "src").mkdir()
    (ws / "src" / "main.py").write_text("import os\nprint('hi')\n")
    (ws / "notes.txt").write_text("one\ntwo\nthree\n")
    (ws / "blob.bin").write_bytes(b"\x00\x01")
    (ws / "out").symlink_to("/etc")
    session = open_session(ws)
    requests: list[tuple[str, dict[str, object]]] = [
        ("read", {"path": "notes.txt", "offset": 2}),
        ("read", {"path": "out/passwd"}),
        ("read", {"path": "../etc/passwd"}),
        ("read", {"path": "blob.bin"}),
        ("read", {"path": "missing.txt"}),
        ("list", {}),
        ("glob", {"pattern": "**/*.py"}),
        ("grep", {"pattern": "t", "path": "notes.txt"}),
        ("grep", {"pattern": "("}),
        ("write", {"path": "out/x", "content": "no"}),
        ("edit", {"path": "notes.txt", "old_string": "absent", "new_string": "x"}),
        ("nonsense", {}),
    ]
    for op, args in requests:
        # when the same request is answered by the supervisor and by a fresh interpreter
        served = helper(session, "/usr/bin/python3", op, **args)
        fresh = helper(session, "python3", op, **args)
        # then both answers are byte-identical
        assert served == fresh, (op, args)
        assert served[0] == 0
    # and writes and edits land the same way through both
    assert helper(session, "/usr/bin/python3", "write", path="a/one.txt", content="x\n")[0] == 0
    assert helper(session, "python3", "write", path="a/two.txt", content="x\n")[0] == 0
    assert (ws / "a" / "one.txt").read_bytes() == (ws / "a" / "two.txt").read_bytes() == b"x\n"
    served_edit = helper(
        session, "/usr/bin/python3", "edit", path="a/one.txt", old_string="x", new_string="y"
    )
    fresh_edit = helper(
        session, "python3", "edit", path="a/two.txt", old_string="x", new_string="y"
    )
    assert served_edit[1].replace(b"one", b"two") == fresh_edit[1]
    assert (ws / "a" / "one.txt").read_bytes() == (ws / "a" / "two.txt").read_bytes() == b"y\n"


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_file_tool_is_held_to_the_sessions_file_size_limit(ws: Path, backend: str) -> None:
    # given a session whose files may be at most 4 KiB
    (ws / "keep.txt").write_text("original\n")
    spec = SessionSpec(workspace=ws, limits=Limits(file_size_bytes=4096))
    with get_backend(backend).open(spec) as session:
        # when the write tool writes 8 KiB, new and over an existing file
        new = run(session, "write", path="big.txt", content="x" * 8192)
        over = run(session, "write", path="keep.txt", content="y" * 8192)
        small = run(session, "write", path="small.txt", content="z" * 4096)
    # then both are refused as too large and nothing changed; a write within the limit works
    assert (new.ok, new.error_code, new.output) == (
        False,
        ErrorCode.TOO_LARGE,
        "big.txt: File too large",
    )
    assert (over.ok, over.error_code, over.output) == (
        False,
        ErrorCode.TOO_LARGE,
        "keep.txt: File too large",
    )
    assert small.ok
    assert sorted(p.name for p in ws.iterdir()) == ["keep.txt", "small.txt"]
    assert (ws / "keep.txt").read_text() == "original\n"


def test_no_process_waits_beside_a_command_after_file_tools(
    ws: Path, open_session: OpenSession
) -> None:
    # given a session, and the processes a command sees in it before any file tool ran
    (ws / "notes.txt").write_text("text\n")
    session = open_session(ws)
    show = (
        "import json, os; me = os.getpid(); "
        "print(json.dumps(sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != me)))"
    )

    def others() -> list[int]:
        # every process of the sandbox but the command itself
        result = session.exec(ExecRequest(argv=["/usr/bin/python3", "-c", show]))
        assert result.exit_code == 0, result.stderr
        listed: list[int] = json.loads(result.stdout)
        return listed

    before = others()
    # when file tools ran (one after another, then one more after a command)
    assert all(run(session, "read", path="notes.txt").ok for _ in range(3))
    after_reads = others()
    assert run(session, "list").ok
    after_list = others()
    # then the next command sees exactly the processes it saw before: nothing of the file tools
    # (neither a finished child nor one waiting for the next request) is left beside it
    assert after_reads == before
    assert after_list == before
    # and the file tools still answer after it
    assert run(session, "read", path="notes.txt").output == "text\n"


def test_a_file_call_past_its_timeout_is_killed_and_the_next_one_works(
    ws: Path, open_session: OpenSession
) -> None:
    # given a line on which a backtracking pattern takes practically forever
    (ws / "slow.txt").write_text("a" * 40 + "b\n")
    (ws / "notes.txt").write_text("text\n")
    session = open_session(ws)
    assert run(session, "read", path="notes.txt").ok
    # when grep runs it with a one-second timeout
    result = session.exec(
        ExecRequest(
            argv=["/usr/bin/python3", "-I", "-B", TOOLS_PY, "grep"],
            stdin=json.dumps({"pattern": "(a+)+$", "path": "slow.txt"}).encode(),
            timeout_s=1,
        )
    )
    # then it is killed at the deadline, and the next file call gets its answer
    assert (result.timed_out, result.exit_code, result.stdout) == (True, None, b"")
    assert run(session, "read", path="notes.txt").output == "text\n"


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_file_tools_are_held_to_what_is_left_of_the_workspace_quota(ws: Path, backend: str) -> None:
    # given a session whose workspace may hold 256 KiB
    spec = SessionSpec(workspace=ws, limits=Limits(workspace_bytes=256 * 1024))
    with get_backend(backend).open(spec) as session:
        # when a 160 KiB file is written, then another, then the first is shrunk and the
        # second written again
        first = run(session, "write", path="a.txt", content="a" * 160 * 1024)
        refused = run(session, "write", path="b.txt", content="b" * 160 * 1024)
        shrunk = run(session, "write", path="a.txt", content="a")
        second = run(session, "write", path="b.txt", content="b" * 160 * 1024)
    # then the write past the quota is refused and leaves nothing behind, and once space was
    # freed the same write works
    assert first.ok and shrunk.ok and second.ok
    assert (refused.ok, refused.error_code, refused.output) == (
        False,
        ErrorCode.TOO_LARGE,
        "b.txt: File too large",
    )
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt", "b.txt"]
    assert (ws / "b.txt").stat().st_size == 160 * 1024


@pytest.mark.parametrize("backend", ["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def test_reading_tools_work_in_a_workspace_over_its_quota_and_writes_do_not(
    ws: Path, backend: str
) -> None:
    # given a workspace already over its 64 KiB quota (files put there from outside)
    (ws / "big.bin").write_bytes(b"\x01" * 128 * 1024)
    (ws / "notes.txt").write_text("text\n")
    spec = SessionSpec(workspace=ws, limits=Limits(workspace_bytes=64 * 1024))
    with get_backend(backend).open(spec) as session:
        # when the reading tools and then a write run
        read = run(session, "read", path="notes.txt")
        listing = run(session, "list")
        found = run(session, "grep", pattern="text")
        write = run(session, "write", path="more.txt", content="x")
    # then the reading tools answer (they write nothing), and the write is refused as too large
    assert (read.ok, read.output) == (True, "text\n")
    assert (listing.ok, listing.output) == (
        True,
        "file  big.bin (131072 bytes)\nfile  notes.txt (5 bytes)",
    )
    assert (found.ok, found.output) == (True, "notes.txt:1: text")
    assert (write.ok, write.error_code) == (False, ErrorCode.TOO_LARGE)
    assert not (ws / "more.txt").exists()
