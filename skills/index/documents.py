"""What a skill version is indexed from (seed 002 §9 "Search entries"), as one text.

Pure functions of a version's stored facts (name, description, SKILL.md front matter and body,
other files), so the migration that indexes existing skills and the install hook build the same
document. Sources, in weight order:

- the name (hyphens split), repeated: the strongest signal;
- the description, twice;
- keywords and example queries: from the SKILL.md front matter's `metadata` (`keywords`,
  `example_queries`, a list or a comma-separated string) and from `manifest_search_terms`;
- the SKILL.md headings;
- the MCP tools' names and docstrings: those the version's deployed server registered from its
  `tools/list` (name and description, supplied by a tool source; see `skills.index.store`), and
  the names `mcp_tool_terms` reads from the manifest for tools no server registered yet.

`manifest_search_terms` and `mcp_tool_terms` read the MCP skill manifest (skill.toml, seed 002
§3) of a version that stores one: its `[search]` keywords and example queries, and the tools its
`[tools.<name>]` tables declare.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skills.bundle.types import SKILL_MD

MANIFEST_PATH = "skill.toml"
#: Most headings, keywords and example queries taken from one skill, and longest of each: a
#: skill cannot buy rank (or bloat the index) by repeating terms.
MAX_TERMS = 50
MAX_TERM_CHARS = 300
MAX_DOCUMENT_CHARS = 20_000

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?^---[ \t]*$\n?", re.MULTILINE | re.DOTALL)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ToolTerms:
    """One MCP tool as the index sees it."""

    name: str
    docstring: str = ""


@dataclass(frozen=True)
class SearchTerms:
    """The searchable parts of one skill version."""

    name: str
    description: str
    headings: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    example_queries: list[str] = field(default_factory=list)
    tools: list[ToolTerms] = field(default_factory=list)

    def as_fields(self) -> dict[str, Any]:
        """JSON form kept on the index entry."""
        return {
            "name": self.name,
            "description": self.description,
            "headings": self.headings,
            "keywords": self.keywords,
            "example_queries": self.example_queries,
            "tools": [{"name": t.name, "docstring": t.docstring} for t in self.tools],
        }

    def document(self) -> str:
        """The text the lexical index tokenizes and the embedding is computed from."""
        words = self.name.replace("-", " ").replace("_", " ")
        parts = [words, words, words, self.description, self.description]
        parts += self.keywords + self.keywords + self.example_queries + self.headings
        for tool in self.tools:
            parts += [tool.name.replace("_", " "), tool.docstring]
        return "\n".join(p for p in parts if p)[:MAX_DOCUMENT_CHARS]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple):
        items = [v for v in value if isinstance(v, str | int | float)]
    else:
        return []
    out = [str(v).strip()[:MAX_TERM_CHARS] for v in items]
    return [v for v in out if v][:MAX_TERMS]


def headings(body: str) -> list[str]:
    """Markdown ATX headings of a SKILL.md body, outside fenced code."""
    outside = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", body, flags=re.MULTILINE | re.DOTALL)
    return [h[:MAX_TERM_CHARS] for h in _HEADING.findall(outside)][:MAX_TERMS]


def skill_md_body(data: bytes) -> str:
    """The markdown after SKILL.md's front matter. The stored version already holds the parsed
    front matter, so the YAML is not read again (indexing 10,000 skills would spend most of its
    time there); text without a closing fence has no body."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff").replace("\r\n", "\n")
    match = _FRONT_MATTER.match(text)
    return text[match.end() :] if match else ""


def _manifest(files: Mapping[str, bytes]) -> dict[str, Any]:
    """The skill.toml of `files` as a table; empty when absent or unreadable."""
    raw = files.get(MANIFEST_PATH)
    if raw is None:
        return {}
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def manifest_search_terms(files: Mapping[str, bytes]) -> tuple[list[str], list[str]]:
    """(keywords, example_queries) from the MCP skill manifest's `[search]` table.

    Read here with tomllib, leniently, rather than through the bundle's manifest validation:
    the index takes whatever a stored version holds and anything unreadable contributes
    nothing (a refused manifest never reaches storage anyway).
    """
    search = _manifest(files).get("search")
    if not isinstance(search, dict):
        return [], []
    return _strings(search.get("keywords")), _strings(search.get("example_queries"))


_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def mcp_tool_terms(files: Mapping[str, bytes]) -> list[ToolTerms]:
    """Each MCP tool the manifest declares (its `[tools.<name>]` tables), by name.

    The manifest names tools but carries no docstrings; a docstring comes with the server's
    own tool list once a deployed server is introspected (`ToolTerms.docstring`).
    """
    tools = _manifest(files).get("tools")
    if not isinstance(tools, dict):
        return []
    return [ToolTerms(name=name) for name in tools if _TOOL_NAME.fullmatch(name)][:MAX_TERMS]


def tools_merge(registered: list[ToolTerms], declared: list[ToolTerms]) -> list[ToolTerms]:
    """The registered tools (with their docstrings, cut to MAX_TERM_CHARS · 4), then the
    declared ones no server registered; at most MAX_TERMS."""
    out = [
        ToolTerms(name=t.name[:64], docstring=t.docstring.strip()[: MAX_TERM_CHARS * 4])
        for t in registered
        if t.name
    ]
    seen = {t.name for t in out}
    out += [t for t in declared if t.name not in seen]
    return out[:MAX_TERMS]


def search_terms(
    *,
    name: str,
    description: str,
    frontmatter: Mapping[str, Any],
    files: Mapping[str, bytes],
    registered_tools: list[ToolTerms] | None = None,
) -> SearchTerms:
    """Everything one version is indexed from. `files` maps paths to bytes and needs only
    SKILL.md and skill.toml (the other files are not read); `registered_tools` are the tools
    a deployed server of the version listed (name and docstring)."""
    skill_md = files.get(SKILL_MD)
    body = skill_md_body(skill_md) if skill_md is not None else ""
    metadata = frontmatter.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    keywords = _strings(metadata.get("keywords"))
    examples = _strings(metadata.get("example_queries"))
    m_keywords, m_examples = manifest_search_terms(files)
    return SearchTerms(
        name=name,
        description=description,
        headings=headings(body),
        keywords=(keywords + m_keywords)[:MAX_TERMS],
        example_queries=(examples + m_examples)[:MAX_TERMS],
        tools=tools_merge(registered_tools or [], mcp_tool_terms(files)),
    )


def text_hash(document: str) -> str:
    """sha256 hex of a document (an embedding is current while this matches)."""
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


#: The only files `search_terms` reads (so callers fetch just these rows).
INDEXED_FILES = (SKILL_MD, MANIFEST_PATH)
