"""Host names written without a scheme: ``api.exchangerate.host`` in prose, a shell line or a string.

A word counts as a host when it ends in a public suffix of the Public Suffix List (the
``publicsuffixlist`` package ships the list; nothing is fetched at run time) and the context
reads as a host, not as code or a file name:

* written in lowercase (``README.md``, ``Node.JS`` and ``ASP.NET`` are names, not hosts);
* not ending in a common file extension (``setup.py``, ``SKILL.md``, ``run.sh``, ``data.zip``
  end in real TLDs), unless a path or port follows (``docs.rs/serde``, ``bun.sh:443``);
* not an attribute chain of code: not followed by ``(`` or ``=``, not starting with a usual
  receiver (``self.``, ``os.``, ``user.``), and inside program code (a ``.py``/``.js``/...
  file or a fenced block in such a language) only between quotes;
* not an e-mail address (``someone@corp.io``), but ``git@github.com:org/repo`` is a host;
* not part of a URL or a path (URLs are parsed separately by the review).

IP addresses written bare are left to the suspicious-pattern rules.
"""

from __future__ import annotations

import bisect
import re

from publicsuffixlist import PublicSuffixList

_PSL = PublicSuffixList()  # the list bundled with the package; update() is never called

_CANDIDATE = re.compile(
    r"(?<![\w.\\/$%#-])[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?){1,10}(?![\w-]|\.[A-Za-z0-9])"
)
_FILE_EXTENSIONS = frozenset(
    """
    py pyc pyi ipynb md markdown rst txt csv tsv json jsonl yaml yml toml ini cfg conf env lock
    log sh bash zsh fish ps1 psm1 bat cmd vbs js mjs cjs jsx ts tsx vue svelte css scss sass less
    html htm xml svg rb go rs java kt kts scala swift c h cc cpp hpp cs php pl pm lua r dart ex
    exs erl hs ml sql db sqlite sqlite3 png jpg jpeg gif webp ico bmp tif tiff pdf doc docx xls
    xlsx ppt pptx odt ods mov mp4 mp3 wav avi mkv webm flac ogg zip tar gz tgz bz2 xz zst 7z rar
    exe msi dmg pkg deb rpm apk jar war whl egg so dll dylib bin o a wasm map pem crt key
    cer asc gpg sig ttf otf woff woff2 ics eml srt vtt tf tfvars hcl nix mk gradle plist
    service timer desktop bak tmp orig diff patch ps
    """.split()
)  # fmt: skip
# Usual receivers of attribute access in code and code-like prose (`self.name`, `os.path`).
_CODE_RECEIVERS = frozenset(
    """
    self this cls super os sys re np pd json obj req res resp response request args kwargs opts
    options config settings app user users logger log console window document process module
    exports err error e event ctx context data item row model client session db math time path
    file fs http torch tf plt st parser result msg message page browser driver el element node
    item record entry payload params query form env
    """.split()
)  # fmt: skip
_CODE_SUFFIXES = (
    ".py", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx", ".rb", ".go", ".rs", ".java", ".kt",
    ".php", ".pl", ".lua", ".swift", ".c", ".h", ".cc", ".cpp", ".cs", ".scala", ".dart",
)  # fmt: skip
_CODE_LANGS = frozenset(
    """
    python py python3 javascript js mjs jsx typescript ts tsx ruby rb go golang rust rs java
    kotlin kt php perl pl lua swift c cpp c++ csharp cs scala dart
    """.split()
)  # fmt: skip
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*\{?\.?([^\s`{}]*)")
_QUOTES = "\"'`"


def _code_regions(path: str, text: str) -> list[tuple[int, int]]:
    """Character ranges of program code: the whole file, or fenced blocks in a code language."""
    if path.lower().endswith(_CODE_SUFFIXES):
        return [(0, len(text))]
    regions: list[tuple[int, int]] = []
    offset = 0
    open_fence: tuple[str, str, int] | None = None  # (fence, language, start of the block)
    for line in text.split("\n"):
        end = offset + len(line) + 1
        if open_fence is None:
            opened = _FENCE_OPEN.match(line)
            if opened:
                open_fence = (opened.group(1), opened.group(2).lower(), end)
        else:
            fence, lang, start = open_fence
            stripped = line.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                if lang in _CODE_LANGS:
                    regions.append((start, offset))
                open_fence = None
        offset = end
    return regions


def _in_regions(position: int, regions: list[tuple[int, int]], starts: list[int]) -> bool:
    """Whether ``position`` lies in one of the sorted, disjoint ``regions`` (``starts``: theirs)."""
    index = bisect.bisect_right(starts, position) - 1
    return index >= 0 and position < regions[index][1]


def is_public_host(host: str) -> bool:
    """True if ``host`` ends in a known public suffix and has a label of its own before it."""
    suffix = _PSL.publicsuffix(host, accept_unknown=False)
    return suffix is not None and "." in host


def bare_hosts(path: str, text: str) -> list[tuple[int, str]]:
    """(offset, host) of each host name written without a scheme in ``text``."""
    regions = _code_regions(path, text)
    starts = [start for start, _ in regions]
    found: list[tuple[int, str]] = []
    for match in _CANDIDATE.finditer(text):
        word = match.group(0)
        start, end = match.span()
        labels = word.split(".")
        if word != word.lower() or all(label.isdigit() for label in labels):
            continue
        before = text[start - 1] if start else ""
        after = text[end : end + 2]
        strong = after[:1] == "/" or (after[:1] == ":" and after[1:2].isdigit())
        if before == "@":
            if after[:1] != ":":
                continue  # an e-mail address
            strong = True
        if after.lstrip()[:1] in ("(", "="):
            continue  # a call or an assignment
        if labels[-1] in _FILE_EXTENSIONS and not strong:
            continue
        if labels[0] in _CODE_RECEIVERS and not strong:
            continue
        if _in_regions(start, regions, starts) and before not in _QUOTES and not strong:
            continue
        if not is_public_host(word):
            continue
        found.append((start, word))
    return found
