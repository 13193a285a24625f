"""The scanner of the review's suspicious-pattern check: applies the rule table to one file.

Text is scanned line by line (long lines in overlapping pieces), and again after undoing the
encodings malware hides behind: base64 and hex runs that decode to text, ``\\xNN`` escapes,
character-code lists, and commands built from string pieces (``'cu' + 'rl'``, ``c""url``). A
hit in decoded text is reported on the line that holds the encoded form. A file gets a time
budget; one built to be slow to scan gets a finding saying it was not fully checked.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .malware_rules import RULES, Rule
from .paths import BIDI_CHARS, ZERO_WIDTH_CHARS
from .types import Finding, Severity

_MAX_FINDINGS_PER_RULE_PER_FILE = 10
_MAX_DECODE_DEPTH = 2  # base64 inside base64 inside the file, no deeper
_PIECE = 4096  # long lines are scanned in pieces of this many characters ...
_OVERLAP = 512  # ... overlapping by more than any pattern's reach
_UNLESS_REACH = 24  # characters before a match where a negation cancels it
_BLOB = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
#: Seconds one file may take to scan; a file that takes longer gets a finding of its own.
SCAN_BUDGET_SECONDS = 10.0


# -- scanning ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """A rule that fired: where (1-based line), on what, and through which decoding."""

    rule: Rule
    line: int
    shown: str
    decoded_from: str = ""


def _applicable(text: str) -> list[Rule]:
    lowered = text.lower()
    return [r for r in RULES if not r.needles or any(n in lowered for n in r.needles)]


class ScanBudgetExceeded(Exception):
    """The time budget of one file ran out; ``line`` is where scanning stopped."""

    def __init__(self, line: int) -> None:
        super().__init__(f"scan budget exceeded at line {line}")
        self.line = line


def _pieces(line: str) -> list[str]:
    """A long line in overlapping pieces, so one regex call never sees more than a piece."""
    if len(line) <= _PIECE + _OVERLAP:
        return [line]
    return [line[i : i + _PIECE + _OVERLAP] for i in range(0, len(line), _PIECE)]


def _rule_hit(rule: Rule, lines: list[str], index: int, deadline: float | None) -> str | None:
    """The text to show if ``rule`` fires on ``lines[index]``, else None."""
    line = lines[index]
    for piece in _pieces(line):
        if deadline is not None and time.monotonic() >= deadline:
            raise ScanBudgetExceeded(index + 1)
        for match in rule.pattern.finditer(piece):
            if rule.verify is not None and not rule.verify(match):
                continue
            before = piece[max(0, match.start() - _UNLESS_REACH) : match.start()]
            if rule.unless is not None and rule.unless.search(before):
                continue
            if rule.then is None or rule.then.search(piece, match.end()):
                return piece[match.start() :]
            for following in lines[index + 1 : index + 1 + rule.within_lines]:
                if rule.then.search(following[: _PIECE + _OVERLAP]):
                    return f"{piece[match.start() :]} ... {following}"
            break
    return None


def scan_lines(
    text: str, rules: Iterable[Rule] | None = None, *, deadline: float | None = None
) -> list[Hit]:
    """Hits of ``rules`` (default: every applicable rule) on the plain text, line by line.

    Past ``deadline`` (a :func:`time.monotonic` value) :class:`ScanBudgetExceeded` is raised.
    """
    chosen = _applicable(text) if rules is None else list(rules)
    lines = text.split("\n")
    hits: list[Hit] = []
    for index in range(len(lines)):
        specific: list[Hit] = []
        generic: list[Hit] = []
        lowered = lines[index].lower()
        for rule in chosen:
            if not rule.may_match(lowered):
                continue
            shown = _rule_hit(rule, lines, index, deadline)
            if shown is not None:
                (generic if rule.generic else specific).append(Hit(rule, index + 1, shown))
        hits.extend(specific)
        if not specific:
            hits.extend(generic)
    return hits


# -- decoded views -----------------------------------------------------------------------------

_B64_CANDIDATE = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9_-]{16,}={0,2}")
_HEX_CANDIDATE = re.compile(r"\b(?:[0-9a-fA-F]{2}){12,}\b")
_ESCAPES = re.compile(r"(?:\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u00[0-9a-fA-F]{2}){6,}")
_CHAR_CODES = re.compile(
    r"(?:fromCharCode\(|\[\s*|\()(\d{2,3}(?:\s*,\s*\d{2,3}){5,})|(?:chr\(\s*\d+\s*\)\s*\+?\s*){4,}"
    r"|(?:\[char\]\s*\d+\s*[+,]?\s*){4,}"
)
_CONCAT = re.compile(r"(?:([\"'])[^\"'\n]{0,16}\1\s*\+\s*){1,12}([\"'])[^\"'\n]{0,16}\2")
_SPLIT_WORD = re.compile(r"\b\w+(?:(?:\"\"|''|\\)\w+)+")


def _printable(data: bytes) -> str | None:
    """Text if ``data`` decodes to mostly printable characters (a hidden command), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(text) < 6:
        return None
    printable = sum(1 for ch in text if ch.isprintable() or ch in "\n\t\r")
    return text if printable >= 0.95 * len(text) else None


def _decode_base64(run: str) -> str | None:
    core = run.rstrip("=")
    padded = core + "=" * (-len(core) % 4)
    for decoder in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            text = _printable(decoder(padded))
        except (binascii.Error, ValueError):
            continue
        if text is not None:
            return text
    return None


def _decode_escapes(run: str) -> str:
    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("\\x"):
            return chr(int(token[2:], 16))
        if token.startswith("\\u"):
            return chr(int(token[2:], 16))
        return chr(int(token[1:], 8))

    return re.sub(r"\\x[0-9a-fA-F]{2}|\\u00[0-9a-fA-F]{2}|\\[0-7]{3}", one, run)


def _decoded_views(text: str, deadline: float | None) -> list[tuple[int, str, str]]:
    """(line number, encoding, decoded text) for each encoded part of ``text`` that decodes."""
    views: list[tuple[int, str, str]] = []

    def add(position: int, how: str, decoded: str | None) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise ScanBudgetExceeded(text.count("\n", 0, position) + 1)
        if decoded:
            views.append((text.count("\n", 0, position) + 1, how, decoded))

    for match in _B64_CANDIDATE.finditer(text):
        run = match.group(0)
        # words and identifiers are rarely mixed-case with digits; base64 of text always is
        if run.isalpha() and (run.islower() or run.isupper()):
            continue
        add(match.start(), "base64", _decode_base64(run))
    for match in _HEX_CANDIDATE.finditer(text):
        try:
            add(match.start(), "hex", _printable(bytes.fromhex(match.group(0))))
        except ValueError:
            continue
    for match in _ESCAPES.finditer(text):
        add(match.start(), "escape codes", _decode_escapes(match.group(0)))
    for match in _CHAR_CODES.finditer(text):
        numbers = [int(n) for n in re.findall(r"\d+", match.group(0))]
        if all(0 < n < 0x110000 for n in numbers):
            add(match.start(), "character codes", "".join(chr(n) for n in numbers))
    for match in _CONCAT.finditer(text):
        pieces = re.findall(r"[\"']([^\"'\n]*)[\"']", match.group(0))
        add(match.start(), "joined strings", "".join(pieces))
    for match in _SPLIT_WORD.finditer(text):
        add(match.start(), "joined strings", re.sub(r"\"\"|''|\\", "", match.group(0)))
    return views


def scan_text(text: str, *, depth: int = 0, deadline: float | None = None) -> list[Hit]:
    """Every hit in ``text``, including hits inside encoded parts (reported on their line)."""
    hits = scan_lines(text, deadline=deadline)
    if depth >= _MAX_DECODE_DEPTH:
        return hits
    for line, how, decoded in _decoded_views(text, deadline):
        try:
            inner = scan_text(decoded, depth=depth + 1, deadline=deadline)
        except ScanBudgetExceeded as exc:
            raise ScanBudgetExceeded(line) from exc
        for hit in inner:
            if hit.rule.id == "obfuscation.string-built" and how == "joined strings":
                continue
            hits.append(Hit(hit.rule, line, hit.shown, hit.decoded_from or how))
    return hits


# -- findings ----------------------------------------------------------------------------------


def snippet(text: str) -> str:
    """One short printable line of ``text`` for a message (no control or invisible chars)."""
    cleaned = "".join(
        ch if ch.isprintable() and ch not in BIDI_CHARS and ch not in ZERO_WIDTH_CHARS else " "
        for ch in text
    )
    cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= 80 else cleaned[:77] + "..."


def suspicious_findings(path: str, text: str) -> list[Finding]:
    """The suspicious-pattern findings of one text file, at most ten per family and file."""
    findings: list[Finding] = []
    counts: dict[str, int] = {}
    severities: dict[str, Severity] = {}
    seen: set[tuple[int, str]] = set()
    stopped_at: int | None = None
    try:
        hits = scan_text(text, deadline=time.monotonic() + SCAN_BUDGET_SECONDS)
    except ScanBudgetExceeded as exc:
        hits, stopped_at = [], exc.line
    for hit in sorted(hits, key=lambda h: (h.line, h.decoded_from != "")):
        rule = hit.rule
        if (hit.line, rule.id) in seen:
            continue
        seen.add((hit.line, rule.id))
        family = rule.family
        counts[family] = counts.get(family, 0) + 1
        if severities.get(family) != "danger":
            severities[family] = rule.severity
        if counts[family] > _MAX_FINDINGS_PER_RULE_PER_FILE:
            continue
        if rule.id == "base64-blob.long":
            blob = _BLOB.match(hit.shown)
            length = len(blob.group(0)) if blob else len(hit.shown)
            shown = f"{length} characters: {snippet(hit.shown[:24])}"
        else:
            shown = snippet(hit.shown)
        via = f" (hidden as {hit.decoded_from})" if hit.decoded_from else ""
        findings.append(
            Finding(
                path,
                family,
                f"line {hit.line}: {rule.catches}{via} [{rule.id}]: {shown}",
                rule.severity,
                why=rule.why,
            )
        )
    for family, count in counts.items():
        extra = count - _MAX_FINDINGS_PER_RULE_PER_FILE
        if extra > 0:
            findings.append(
                Finding(path, family, f"{extra} more like this in the file", severities[family])
            )
    if stopped_at is not None:
        findings.append(
            Finding(
                path,
                "scan-incomplete",
                f"line {stopped_at}: the pattern scan stopped after {SCAN_BUDGET_SECONDS:g} s; "
                "the file was not fully checked: read it by hand",
                "warning",
                why="a file made of thousands of near-misses may be hiding its payload among them",
            )
        )
    if any(ch in BIDI_CHARS for ch in text):
        findings.append(
            Finding(
                path,
                "hidden-characters",
                "contains bidirectional control characters that can make text read "
                "differently from how it displays",
                "warning",
            )
        )
    elif any(ch in ZERO_WIDTH_CHARS for ch in text.lstrip("\ufeff")):
        findings.append(
            Finding(path, "hidden-characters", "contains zero-width characters", "info")
        )
    return findings
