"""SKILL.md: lenient parsing, the strict Agent Skills report, and the installation rules.

Three levels, from most to least forgiving:

1. :func:`parse_skill_md` loads anything a reasonable author could have written — unknown fields,
   nested or flow-style ``metadata: {...}``, a UTF-8 byte-order mark, CRLF line ends, unquoted
   values containing ``": "`` — and reports what it tolerated as findings. It refuses only text
   that has no frontmatter, YAML that cannot be read even after the colon repair, YAML with
   duplicate keys, and frontmatter that is not a mapping.
2. :func:`spec_findings` lists every deviation from the Agent Skills specification (warnings).
3. :func:`installation_problems` is what the store insists on before a skill is installed
   (``^[a-z][a-z0-9-]*[a-z0-9]$`` without ``--``, ≤ 64 chars, equal to its directory, a
   description of 1–1024 chars).

YAML is read with a :class:`yaml.SafeLoader` subclass (never ``yaml.load``) that refuses
duplicate mapping keys: YAML itself requires keys to be unique, PyYAML would silently keep the last
one, and two readers disagreeing on which ``name:`` counts is exactly the ambiguity a review must
not have. Anchors/aliases are allowed but the loaded value is copied into plain JSON types under a
node budget, so an alias bomb or a self-referencing structure is refused instead of exploding.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from typing import Any

import yaml

from .types import SKILL_MD, BundleError, Finding, ParsedSkillMd, Problem

# \Z, not $: "$" also matches before a trailing newline, and a YAML block scalar
# (``name: |``) yields exactly such a name; the database constraint would then refuse it.
NAME_RE = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]\Z")
SPEC_NAME_CHARS = re.compile(r"^[a-z0-9-]+\Z")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_COMPATIBILITY_CHARS = 500
SPEC_FIELDS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)
#: Largest number of YAML values copied out of one frontmatter (guards alias bombs).
MAX_FRONTMATTER_NODES = 10_000
#: Largest frontmatter (characters) and flow-collection nesting accepted. PyYAML's pure-Python
#: scanner slows down sharply with nesting, so both are bounded before it runs; real
#: frontmatter is a few hundred bytes and two or three levels deep.
MAX_FRONTMATTER_CHARS = 65_536
MAX_FLOW_DEPTH = 32

_FENCE = re.compile(r"^---[ \t]*$")


class _UniqueKeyLoader(yaml.SafeLoader):  # type: ignore[misc]
    """SafeLoader that refuses a mapping with the same key twice."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable key, e.g. a list: let the normal constructor complain
            continue
        if duplicate:
            raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
        seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=True)
    return mapping


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key, line)
        self.key = key
        self.line = line


class _TooComplex(Exception):
    pass


def _json_safe(value: Any, budget: list[int]) -> Any:
    """Copy a YAML value into JSON types (dates → ISO strings, keys → str, bytes → base64)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooComplex
    if isinstance(value, dict):
        return {str(k): _json_safe(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v, budget) for v in value]
    if isinstance(value, set):
        return sorted((_json_safe(v, budget) for v in value), key=str)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return str(value)
    return value


def _flow_depth(text: str) -> int:
    """Deepest nesting of flow brackets outside quotes (an upper bound of what YAML sees)."""
    depth = deepest = 0
    quote = ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "\n":
            quote = ""
    return deepest


class _Unbuildable(Exception):
    """YAML that parses but whose values Python cannot build (a 4,301-digit integer, the 45th
    of month 13): PyYAML lets the constructor's ValueError/OverflowError escape as is."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _load_yaml(text: str) -> Any:
    """Load frontmatter YAML; every failure is one of yaml.YAMLError, _DuplicateKey,
    _TooComplex or _Unbuildable, never a stray exception of the constructors."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:  # PyYAML composes nested collections recursively
        raise _TooComplex from None
    except (yaml.YAMLError, _DuplicateKey, _TooComplex):
        raise
    except (ValueError, OverflowError, ArithmeticError, TypeError, LookupError) as exc:
        raise _Unbuildable(str(exc).split(";")[0][:200]) from None


_UNQUOTED_COLON_VALUE = re.compile(
    r"^(?P<key>[A-Za-z0-9_-]+):[ \t]+(?P<value>[^'\"\s\[{|>&*!#].*)$"
)


def _quote_colon_values(text: str) -> str | None:
    """Quote top-level ``key: value`` lines whose value holds ``": "`` (a common authoring slip)."""
    changed = False
    lines = []
    for line in text.split("\n"):
        match = _UNQUOTED_COLON_VALUE.match(line)
        if match and ": " in match["value"]:
            value = match["value"].rstrip().replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{match["key"]}: "{value}"')
            changed = True
        else:
            lines.append(line)
    return "\n".join(lines) if changed else None


def parse_skill_md(data: bytes | str) -> ParsedSkillMd:
    """Split SKILL.md into frontmatter and body, leniently.

    Raises :class:`BundleError` (path ``SKILL.md``) for: undecodable bytes (``skill-md-encoding``),
    no frontmatter (``frontmatter-missing``), no closing ``---`` (``frontmatter-unterminated``),
    YAML that cannot be parsed even after repair, or whose values cannot be built (an integer
    of more than 4,300 digits, an impossible date) (``yaml-invalid``), duplicate keys
    (``yaml-duplicate-key``), alias bombs (``yaml-too-complex``) and frontmatter that is not a
    mapping (``frontmatter-not-mapping``). The returned frontmatter is JSON-safe.
    """
    findings: list[Finding] = []

    def fail(rule: str, message: str) -> BundleError:
        return BundleError([Problem(SKILL_MD, rule, message)])

    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise fail(
                "skill-md-encoding", f"SKILL.md must be UTF-8 text (bad byte at offset {exc.start})"
            ) from None
    else:
        text = data
    if text.startswith("\ufeff"):
        text = text[1:]
        findings.append(
            Finding(SKILL_MD, "bom", "starts with a UTF-8 byte-order mark (ignored)", "warning")
        )
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        findings.append(Finding(SKILL_MD, "crlf", "uses CR/CRLF line ends (read as LF)", "warning"))

    lines = text.split("\n")
    first = 0
    while first < len(lines) and lines[first].strip() == "":
        first += 1
    if first >= len(lines) or not _FENCE.match(lines[first]):
        raise fail(
            "frontmatter-missing",
            "SKILL.md must start with YAML frontmatter between '---' lines",
        )
    if first > 0:
        findings.append(
            Finding(SKILL_MD, "leading-blank-lines", "blank lines before the frontmatter", "info")
        )
    end = next((i for i in range(first + 1, len(lines)) if _FENCE.match(lines[i])), None)
    if end is None:
        raise fail("frontmatter-unterminated", "the frontmatter has no closing '---' line")
    yaml_text = "\n".join(lines[first + 1 : end])
    body = "\n".join(lines[end + 1 :])

    if len(yaml_text) > MAX_FRONTMATTER_CHARS:
        raise fail(
            "frontmatter-too-large",
            f"frontmatter is {len(yaml_text):,} characters; the limit is {MAX_FRONTMATTER_CHARS:,}",
        )
    if _flow_depth(yaml_text) > MAX_FLOW_DEPTH:
        raise fail(
            "yaml-too-complex",
            f"frontmatter nests '[' / '{{' more than {MAX_FLOW_DEPTH} levels deep",
        )
    too_complex = fail(
        "yaml-too-complex",
        f"frontmatter nests too deeply or expands to more than {MAX_FRONTMATTER_NODES} values",
    )
    try:
        loaded = _load_yaml(yaml_text)
    except _TooComplex:
        raise too_complex from None
    except _DuplicateKey as dup:
        raise fail(
            "yaml-duplicate-key",
            f"frontmatter key {dup.key!r} appears more than once (line {dup.line + first + 1})",
        ) from None
    except _Unbuildable as bad:
        raise fail(
            "yaml-invalid", f"frontmatter holds a value that cannot be read: {bad.reason}"
        ) from None
    except yaml.YAMLError as exc:
        repaired = _quote_colon_values(yaml_text)
        loaded = None
        if repaired is not None:
            try:
                loaded = _load_yaml(repaired)
            except (yaml.YAMLError, _DuplicateKey, _TooComplex, _Unbuildable):
                repaired = None
        if repaired is None:
            mark = getattr(exc, "problem_mark", None)
            where = f" at frontmatter line {mark.line + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or "unreadable YAML"
            raise fail("yaml-invalid", f"frontmatter is not valid YAML{where}: {problem}") from None
        findings.append(
            Finding(
                SKILL_MD,
                "yaml-repaired",
                "frontmatter values containing ': ' were read as quoted strings",
                "warning",
            )
        )
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise fail(
            "frontmatter-not-mapping",
            f"frontmatter must be a mapping of fields, not a {type(loaded).__name__}",
        )
    try:
        frontmatter = _json_safe(loaded, [MAX_FRONTMATTER_NODES])
    except (_TooComplex, RecursionError):
        raise too_complex from None
    where = unstorable_text(frontmatter)
    if where is not None:
        raise fail(
            "frontmatter-invalid-char",
            f"frontmatter {where} contains a NUL or an unpaired surrogate character "
            "(YAML escapes such as \\0 or \\ud800), which text cannot hold",
        )
    return ParsedSkillMd(frontmatter=frontmatter, body=body, findings=findings)


def _bad_text(text: str) -> bool:
    return "\0" in text or any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def unstorable_text(value: Any, where: str = "") -> str | None:
    """Where a JSON-like value holds a string with NUL or a lone surrogate, else None.

    YAML and JSON escapes can produce both; neither is valid in text columns or JSON documents
    of PostgreSQL, and no legitimate skill needs them. The result reads like ``field 'a.b'``.
    """
    if isinstance(value, str):
        return f"field {where!r}" if _bad_text(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            if _bad_text(str(key)):
                return f"key {inner!r}"
            found = unstorable_text(item, inner)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = unstorable_text(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def spec_findings(frontmatter: dict[str, Any], dir_name: str | None) -> list[Finding]:
    """Every deviation from the Agent Skills specification, as warnings on SKILL.md."""
    out: list[Finding] = []

    def warn(rule: str, message: str) -> None:
        out.append(Finding(SKILL_MD, rule, message, "warning"))

    name = frontmatter.get("name")
    if name is None:
        warn("spec-name-missing", "the 'name' field is required")
    elif not isinstance(name, str):
        warn("spec-name-type", "'name' must be a string")
    else:
        if not 1 <= len(name) <= MAX_NAME_CHARS:
            warn("spec-name-length", f"'name' must be 1-{MAX_NAME_CHARS} characters")
        if name and not SPEC_NAME_CHARS.match(name):
            warn("spec-name-chars", "'name' may only contain a-z, 0-9 and '-'")
        if name.startswith("-") or name.endswith("-"):
            warn("spec-name-hyphen-edge", "'name' must not start or end with '-'")
        if "--" in name:
            warn("spec-name-double-hyphen", "'name' must not contain '--'")
        if dir_name is not None and name != dir_name:
            warn(
                "spec-name-dir-mismatch",
                f"'name' ({name!r}) must equal its directory name ({dir_name!r})",
            )

    description = frontmatter.get("description")
    if description is None or (isinstance(description, str) and not description.strip()):
        warn("spec-description-missing", "a non-empty 'description' is required")
    elif not isinstance(description, str):
        warn("spec-description-type", "'description' must be a string")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        warn(
            "spec-description-length",
            f"'description' is {len(description)} characters; the limit is {MAX_DESCRIPTION_CHARS}",
        )

    if "compatibility" in frontmatter:
        compatibility = frontmatter["compatibility"]
        if not isinstance(compatibility, str) or not compatibility:
            warn("spec-compatibility", "'compatibility' must be a non-empty string")
        elif len(compatibility) > MAX_COMPATIBILITY_CHARS:
            warn(
                "spec-compatibility",
                f"'compatibility' is {len(compatibility)} characters; the limit is "
                f"{MAX_COMPATIBILITY_CHARS}",
            )

    if "metadata" in frontmatter:
        metadata = frontmatter["metadata"]
        if not isinstance(metadata, dict):
            warn("spec-metadata-type", "'metadata' must be a mapping of strings to strings")
        elif any(not isinstance(v, str) for v in metadata.values()):
            warn("spec-metadata-values", "'metadata' values should be strings")

    if "license" in frontmatter and not isinstance(frontmatter["license"], str):
        warn("spec-license-type", "'license' must be a string")
    if "allowed-tools" in frontmatter and not isinstance(frontmatter["allowed-tools"], str):
        warn("spec-allowed-tools-type", "'allowed-tools' must be a space-separated string")

    for key in sorted(k for k in frontmatter if k not in SPEC_FIELDS):
        warn(
            "spec-unknown-field",
            f"field {key!r} is not part of the Agent Skills specification (kept as is)",
        )
    return out


def installation_problems(frontmatter: dict[str, Any], dir_name: str | None) -> list[Problem]:
    """What the store refuses: a bad or missing name, a missing or overlong description."""
    problems: list[Problem] = []

    def refuse(rule: str, message: str) -> None:
        problems.append(Problem(SKILL_MD, rule, message))

    name = frontmatter.get("name")
    if name is None or name == "":
        refuse("name-missing", "the frontmatter must have a 'name'")
    elif not isinstance(name, str):
        refuse("name-format", "'name' must be a string")
    else:
        if len(name) > MAX_NAME_CHARS:
            refuse(
                "name-too-long",
                f"'name' is {len(name)} characters; the limit is {MAX_NAME_CHARS}",
            )
        if not NAME_RE.match(name):
            refuse(
                "name-format",
                f"'name' {name!r} must be lowercase ASCII letters, digits and '-', start with a "
                "letter and not end with '-'",
            )
        if "--" in name:
            refuse("name-double-hyphen", f"'name' {name!r} must not contain consecutive hyphens")
        if dir_name is not None and name != dir_name:
            refuse(
                "name-dir-mismatch",
                f"'name' {name!r} does not match its directory name {dir_name!r}",
            )

    description = frontmatter.get("description")
    if description is None or (isinstance(description, str) and not description.strip()):
        refuse("description-missing", "the frontmatter must have a non-empty 'description'")
    elif not isinstance(description, str):
        refuse("description-format", "'description' must be a string")
    elif len(description) > MAX_DESCRIPTION_CHARS:
        refuse(
            "description-too-long",
            f"'description' is {len(description)} characters; the limit is {MAX_DESCRIPTION_CHARS}",
        )
    return problems
