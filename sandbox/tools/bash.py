"""Static validation of `bash` tool commands against a command allowlist.

This is defence in depth: the sandbox is the boundary, and a command that passes here still runs
inside it with PATH reduced to the allowlisted binaries. The validator parses the command with a
real shell parser (bashlex) and refuses, naming the offending word and the rule:

- ``parse``: the command is not valid shell or uses a construct the parser does not support
  (``case``, ``[[ ]]``, arithmetic ``$(( ))``, ``time``, quoted heredoc delimiters).
- ``not-allowlisted``: a command name is not in this call's allowlist.
- ``interpreter``: an interpreter (sh, bash, python3, perl, node, awk, ...) that is not explicitly
  allowlisted; they run code given as an argument.
- ``executes-argument``: eval, exec, source, ``.``, builtin, command, env, xargs, nohup, timeout,
  the dynamic loader, ... — refused even when a caller lists them, because they run another
  program whose name the validator cannot see.
- ``shell-state``: builtins that change how later names resolve (hash, enable, alias, export,
  declare, shopt, trap, ...) — refused even when listed.
- ``bare-name``: a command named by a path (``/bin/cat``, ``./x``, ``/proc/self/root/...``).
- ``literal-name``: a command name written with quotes, escapes, globs or expansions
  (``'c'at``, ``\\cat``, ``${X}``) — names must be plain words so what is checked is what runs.
- ``assignment``: ``NAME=value`` prefixes or assignments (``PATH=. cat``, ``LD_PRELOAD=...``).
- ``command-substitution``: ``$(...)``, backticks and arithmetic ``$((...))``, anywhere,
  including unquoted heredoc bodies.
- ``process-substitution``: ``<(...)`` and ``>(...)``.
- ``parameter-expansion``: only ``$NAME``, ``${NAME}`` and the special parameters are allowed;
  operator forms such as ``${X@P}`` or ``${X:-...}`` are refused.
- ``function``: function definitions.
- ``background``: ``&`` (a call must not leave processes behind).
- ``redirection``: a file redirection whose target is not a literal path inside /workspace
  (relative paths are relative to /workspace); ``/dev/null`` is allowed, ``/dev/tcp``,
  ``/proc`` and everything else outside the workspace are not.
- ``dangerous-option``: an allowlisted command given an option that runs other programs
  (``find -exec``, ``tar --to-command``, ...).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import bashlex
import bashlex.errors

#: the default allowlist of the `bash` tool (a skill may pass its own)
DEFAULT_BASH_ALLOWLIST: tuple[str, ...] = (
    "curl",
    "jq",
    "grep",
    "sort",
    "uniq",
    "wc",
    "head",
    "tail",
    "cat",
    "echo",
    "date",
)

#: commands whose output comes from the network; their output is tagged provenance "web"
NETWORK_COMMANDS: frozenset[str] = frozenset({"curl", "wget", "http", "nc", "ssh", "git"})

#: refused even when a caller allowlists them: they run a program the validator cannot see
EXECUTES_ARGUMENT: frozenset[str] = frozenset(
    {
        "eval",
        "exec",
        "source",
        ".",
        "builtin",
        "command",
        "env",
        "xargs",
        "nohup",
        "timeout",
        "nice",
        "ionice",
        "setsid",
        "stdbuf",
        "chroot",
        "sudo",
        "su",
        "doas",
        "watch",
        "strace",
        "ltrace",
        "gdb",
        "unshare",
        "nsenter",
        "busybox",
        "parallel",
        "flock",
        "script",
        "coproc",
        "fc",
        "ld.so",
    }
)

#: refused even when a caller allowlists them: they change how later command names resolve
SHELL_STATE: frozenset[str] = frozenset(
    {
        "hash",
        "enable",
        "alias",
        "unalias",
        "shopt",
        "set",
        "trap",
        "export",
        "declare",
        "typeset",
        "readonly",
        "local",
        "unset",
        "read",
        "mapfile",
        "readarray",
        "printf",  # printf -v assigns variables; use echo
        "cd",
        "pushd",
        "popd",
    }
)

#: run code given as an argument; allowed only when the caller's allowlist names them explicitly
INTERPRETERS: frozenset[str] = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "zsh",
        "ksh",
        "csh",
        "tcsh",
        "fish",
        "python",
        "python2",
        "python3",
        "perl",
        "ruby",
        "node",
        "nodejs",
        "npx",
        "npm",
        "php",
        "lua",
        "tclsh",
        "awk",
        "gawk",
        "mawk",
        "nawk",
        "deno",
        "bun",
    }
)

#: options of allowlisted commands that make them run other programs
DANGEROUS_OPTIONS: dict[str, tuple[str, ...]] = {
    "find": ("-exec", "-execdir", "-ok", "-okdir"),
    "tar": (
        "--to-command",
        "--use-compress-program",
        "--checkpoint-action",
        "--info-script",
        "--new-volume-script",
        "-I",
        "-F",
    ),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "git": ("-c", "--exec-path", "--upload-pack", "--config-env"),
    "sort": ("--compress-program",),
    "curl": ("--engine",),
}

_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
_LOADER = re.compile(r"^ld(-linux.*|64)?\.so.*|^ld-.*\.so.*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAMS = set("?#$!@*-0123456789")
_WORKSPACE = "/workspace"
_ALLOWED_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin"})


class BashRefused(Exception):
    """A command was refused by the validator. `rule` is one of the names in the module doc."""

    def __init__(self, rule: str, word: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.word = word
        self.message = message


@dataclass(frozen=True, slots=True)
class BashCheck:
    """What a command that passed validation will run."""

    commands: tuple[str, ...]  # command names in source order, duplicates removed

    @property
    def uses_network(self) -> bool:
        return any(name in NETWORK_COMMANDS for name in self.commands)


def validate_bash(command: str, allowlist: Sequence[str] = DEFAULT_BASH_ALLOWLIST) -> BashCheck:
    """Check `command` against `allowlist`; raise BashRefused naming the word and the rule."""
    if not command.strip():
        raise BashRefused("parse", "", "the command is empty")
    if "\x00" in command:
        raise BashRefused("parse", "\\x00", "the command contains a NUL byte")
    try:
        trees = bashlex.parse(command)
    except (bashlex.errors.ParsingError, NotImplementedError, IndexError, AttributeError) as exc:
        raise BashRefused(
            "parse",
            "",
            f"could not parse the command ({exc}); supported: simple commands, pipelines, "
            "&&, ||, ;, ( ), { }, if/for/while, redirections inside /workspace",
        ) from exc
    walker = _Walker(command, frozenset(allowlist))
    for tree in trees:
        walker.visit(tree)
    walker.scan_text()
    return BashCheck(commands=tuple(dict.fromkeys(walker.names)))


class _Walker:
    def __init__(self, source: str, allowlist: frozenset[str]) -> None:
        self.source = source
        self.allowlist = allowlist
        self.names: list[str] = []
        self.heredocs: list[tuple[int, int, bool]] = []  # (start, end, expands)

    def raw(self, node: Any) -> str:
        start, end = node.pos
        return self.source[start:end]

    def visit(self, node: Any) -> None:
        kind = node.kind
        if kind == "function":
            name = node.parts[0].word if node.parts else ""
            raise BashRefused("function", name, f"`{name}()`: defining functions is not allowed")
        if kind == "list":
            for part in node.parts:
                if part.kind == "operator" and part.op == "&":
                    raise BashRefused(
                        "background",
                        "&",
                        "`&`: running commands in the background is not allowed",
                    )
                self.visit(part)
            return
        if kind == "command":
            self.visit_command(node)
            return
        if kind == "commandsubstitution":
            raise BashRefused(
                "command-substitution",
                self.raw(node),
                f"{self.raw(node)!r}: command substitution is not allowed",
            )
        if kind == "processsubstitution":
            raise BashRefused(
                "process-substitution",
                self.raw(node),
                f"`{self.raw(node)}`: process substitution is not allowed",
            )
        if kind == "compound":
            for part in node.list:
                self.visit(part)
            for redirect in getattr(node, "redirects", None) or ():
                self.visit_redirect(redirect)
            return
        if kind in ("pipeline", "if", "for", "while", "until"):
            for part in node.parts:
                self.visit(part)
            return
        if kind == "parameter":
            value = str(node.value)
            if not (_NAME.fullmatch(value) or value in _SPECIAL_PARAMS):
                raise BashRefused(
                    "parameter-expansion",
                    self.raw(node),
                    f"`{self.raw(node)}`: only $NAME and ${{NAME}} parameter expansions are allowed",
                )
            return
        if kind in ("operator", "pipe", "reservedword", "word", "tilde"):
            for part in getattr(node, "parts", None) or ():
                self.visit(part)
            return
        if kind == "redirect":
            self.visit_redirect(node)
            return
        raise BashRefused(
            "parse", self.raw(node), f"`{self.raw(node)}`: unsupported shell construct ({kind})"
        )

    def visit_command(self, node: Any) -> None:
        name: str | None = None
        for part in node.parts:
            if part.kind == "assignment":
                raise BashRefused(
                    "assignment",
                    part.word,
                    f"`{part.word}`: variable assignments are not allowed "
                    "(they can change PATH, LD_PRELOAD and how commands run)",
                )
            if part.kind == "redirect":
                self.visit_redirect(part)
                continue
            if part.kind != "word":
                self.visit(part)
                continue
            for sub in part.parts or ():
                self.visit(sub)
            if name is None:
                name = self.check_name(part)
                self.names.append(name)
            else:
                self.check_argument(name, part)

    def check_name(self, word: Any) -> str:
        raw = self.raw(word)
        if "/" in word.word or "/" in raw:
            raise BashRefused(
                "bare-name",
                raw,
                f"`{raw}`: commands must be named by their bare name from the allowlist, "
                "not by a path",
            )
        if raw in EXECUTES_ARGUMENT or _LOADER.match(raw):
            raise BashRefused(
                "executes-argument",
                raw,
                f"`{raw}` runs another program given as its argument; it is never allowed",
            )
        if raw != word.word or not _PLAIN_NAME.fullmatch(raw):
            raise BashRefused(
                "literal-name",
                raw,
                f"`{raw}`: a command name must be a plain word "
                "(no quotes, escapes, globs or expansions)",
            )
        name = raw
        if name in SHELL_STATE:
            raise BashRefused(
                "shell-state",
                name,
                f"`{name}` changes shell state (variables, name lookup); it is never allowed",
            )
        if name not in self.allowlist:
            if name in INTERPRETERS:
                raise BashRefused(
                    "interpreter",
                    name,
                    f"`{name}` is an interpreter (it runs code given as an argument) and is not "
                    "in this call's allowlist; use the code tool for Python",
                )
            raise BashRefused(
                "not-allowlisted",
                name,
                f"`{name}` is not in this call's allowlist ({', '.join(sorted(self.allowlist))})",
            )
        return name

    def check_argument(self, name: str, word: Any) -> None:
        options = DANGEROUS_OPTIONS.get(name)
        if not options:
            return
        text = word.word
        for option in options:
            if text == option or (option.startswith("--") and text.startswith(option + "=")):
                raise BashRefused(
                    "dangerous-option",
                    text,
                    f"`{name} {text}`: this option makes `{name}` run other programs",
                )

    def visit_redirect(self, node: Any) -> None:
        kind = node.type
        target = node.output
        if kind in ("<<", "<<-"):
            heredoc = getattr(node, "heredoc", None)
            if heredoc is not None:
                self.heredocs.append((heredoc.pos[0], heredoc.pos[1], True))
            return
        if isinstance(target, int):
            return  # file-descriptor duplication such as 2>&1
        if kind == "<<<":
            return  # a here-string is text; its expansions are checked by scan_text
        raw = self.raw(target)
        if kind in (">&", "<&") and (raw == "-" or raw.isdigit()):
            return
        self.check_path(raw, target.word)

    def check_path(self, raw: str, word: str) -> None:
        if raw != word or any(ch in raw for ch in "$`*?[~{"):
            raise BashRefused(
                "redirection",
                raw,
                f"`{raw}`: a redirection target must be a literal path inside /workspace",
            )
        if word in _ALLOWED_DEVICES:
            return
        path = word if word.startswith("/") else posixpath.join(_WORKSPACE, word)
        normal = posixpath.normpath(path)
        if normal != _WORKSPACE and not normal.startswith(_WORKSPACE + "/"):
            raise BashRefused(
                "redirection",
                raw,
                f"`{raw}`: redirections may only read or write files inside /workspace",
            )

    def scan_text(self) -> None:
        """Quote-aware scan of the raw source for expansions the tree does not show."""
        source = self.source
        segments: list[tuple[int, int, bool]] = []
        cursor = 0
        for start, end, expands in sorted(self.heredocs):
            segments.append((cursor, start, False))
            if expands:
                segments.append((start, end, True))
            cursor = end
        segments.append((cursor, len(source), False))
        for start, end, heredoc in segments:
            _scan(source[start:end], heredoc=heredoc)


def _scan(text: str, *, heredoc: bool) -> None:
    i = 0
    n = len(text)
    in_double = False
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if not heredoc and not in_double and ch == "#" and (i == 0 or text[i - 1] in " \t\n;&|()"):
            # a comment runs to the end of the line; its quotes must not desynchronise the scan
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        if not heredoc and not in_double and ch == "'":
            close = text.find("'", i + 1)
            i = n if close < 0 else close + 1
            continue
        if not heredoc and ch == '"':
            in_double = not in_double
            i += 1
            continue
        if ch == "`":
            raise BashRefused(
                "command-substitution", "`", "backticks `...`: command substitution is not allowed"
            )
        if ch in "<>" and not in_double and not heredoc and text[i + 1 : i + 2] == "(":
            raise BashRefused(
                "process-substitution",
                text[i : i + 2],
                f"`{text[i : i + 2]}...)`: process substitution is not allowed",
            )
        if ch == "$":
            i = _check_dollar(text, i, quoted=in_double or heredoc)
            continue
        i += 1


def _check_dollar(text: str, i: int, *, quoted: bool) -> int:
    nxt = text[i + 1 : i + 2]
    if nxt == "(":
        word = "$((" if text[i + 2 : i + 3] == "(" else "$("
        raise BashRefused(
            "command-substitution",
            word,
            f"`{word}...)`: command substitution and arithmetic expansion are not allowed",
        )
    if nxt == "{":
        close = text.find("}", i + 2)
        inner = text[i + 2 : close] if close >= 0 else text[i + 2 :]
        if close < 0 or not (_NAME.fullmatch(inner) or inner in _SPECIAL_PARAMS):
            shown = text[i : close + 1] if close >= 0 else text[i:]
            raise BashRefused(
                "parameter-expansion",
                shown,
                f"`{shown}`: only $NAME and ${{NAME}} parameter expansions are allowed",
            )
        return close + 1
    if nxt == "'" and not quoted:
        # ANSI-C quoting $'...': text only; skip it like a single-quoted string
        j = i + 2
        while j < len(text) and text[j] != "'":
            j += 2 if text[j] == "\\" else 1
        return j + 1
    return i + 1


def allowlist_from(names: Iterable[str]) -> tuple[str, ...]:
    """Normalise a caller's allowlist: plain names only, duplicates removed, order kept."""
    result: list[str] = []
    for name in names:
        if not _PLAIN_NAME.fullmatch(name):
            raise ValueError(f"allowlist entry {name!r} is not a plain command name")
        if name not in result:
            result.append(name)
    return tuple(result)
