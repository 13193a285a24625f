"""Template helpers of the approval console: status badges, short hashes, safe markdown, diffs.

Skill files are written by whoever produced the skill (a motor run, a pasted file, a download),
so everything rendered from them is treated as hostile: raw HTML is escaped, links keep only
http(s)/mailto/relative targets and images become plain links (an image would make the reviewer's
browser fetch a URL of the author's choosing).
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET  # noqa: S405 - builds trees from markdown output, parses nothing

import markdown
from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from skills.approval import REJECTED_LABEL, policy_is_rejected
from skills.bundle.paths import BIDI_CHARS, ZERO_WIDTH_CHARS
from skills.models import Policy, PolicyStatus

register = template.Library()

SHORT_HASH_HEX = 12  # hex characters shown of a sha256 digest
SAFE_LINK_SCHEMES = frozenset({"http", "https", "mailto"})
_URL_IGNORED = re.compile(r"[\x00-\x20\x7f]")


_HIDDEN_CHARS = re.compile("[" + "".join(sorted(BIDI_CHARS | ZERO_WIDTH_CHARS)) + "]")


def reveal_hidden(text: str) -> str:
    """Replace bidi-override and zero-width characters with a visible `⟦U+XXXX⟧` marker.

    Such characters make text display differently from what it says (a reviewer would read
    one thing while the motor reads another), so the console never renders them as-is.
    """
    return _HIDDEN_CHARS.sub(lambda m: f"⟦U+{ord(m.group(0)):04X}⟧", text)


@register.filter(name="reveal_hidden")
def reveal_hidden_filter(text: str) -> str:
    return reveal_hidden(text or "")


@register.filter
def status_badge(status: str) -> SafeString:
    """A coloured badge for a policy status (unknown values render as plain grey badges)."""
    try:
        label = PolicyStatus(status).label
    except ValueError:
        label = status or "none"
    return format_html('<span class="mc-badge mc-badge--{}">{}</span>', status or "none", label)


@register.filter
def policy_badge(policy: Policy) -> SafeString:
    """The policy's status badge; a rejected policy (still pending review, as seed 000 keeps it)
    reads "Rejected — awaiting a new version"."""
    if policy_is_rejected(policy):
        return format_html('<span class="mc-badge mc-badge--rejected">{}</span>', REJECTED_LABEL)
    return status_badge(policy.status)


@register.filter
def short_hash(value: str | None) -> str:
    """`sha256:` + the first 12 hex characters (or the first 12 of a bare hex digest)."""
    if not value:
        return ""
    prefix, sep, digest = str(value).partition(":")
    if sep:
        return f"{prefix}:{digest[:SHORT_HASH_HEX]}"
    return str(value)[:SHORT_HASH_HEX]


def _safe_target(url: str) -> str | None:
    """The link target as a browser would read it, or None unless it is absolute http(s)/mailto.

    Entities are decoded and whitespace/control characters dropped first, because browsers do
    the same (`jav&#x61;script:` and `java\tscript:` are both `javascript:` to them).
    """
    cleaned = _URL_IGNORED.sub("", html.unescape(url))
    head = re.split(r"[/?#]", cleaned, maxsplit=1)[0]
    if ":" not in head:
        # Relative targets would resolve inside the admin, where they mean nothing (or, worse,
        # point at a console URL); they stay as text.
        return None
    scheme = head.split(":", 1)[0].lower()
    return cleaned if scheme in SAFE_LINK_SCHEMES else None


class _DefangTreeprocessor(markdown.treeprocessors.Treeprocessor):
    """Drops unsafe link targets and turns images into links that show their address."""

    def run(self, root: ET.Element) -> None:
        for element in root.iter():
            if element.tag == "a":
                href = element.get("href", "")
                target = _safe_target(href)
                if target is None:
                    element.attrib.pop("href", None)
                    element.set("class", "mc-inert-link")
                    element.set("title", f"link target not followed: {href}")
                else:
                    element.set("href", target)
                    element.set("rel", "noopener noreferrer nofollow")
                    element.set("target", "_blank")
            elif element.tag == "img":
                src = element.get("src", "")
                alt = element.get("alt", "") or "image"
                title = element.get("title")
                element.attrib.clear()
                element.tag = "span"
                element.set("class", "mc-image-placeholder")
                element.text = f"[image: {alt} — {src}]"
                if title:
                    element.set("title", title)


#: heading levels a rendered document is pushed down by: it sits under the page's h1, the
#: section's h2 and the file's own title, so its "# Title" becomes an h4 (h6 at most)
HEADING_SHIFT = 3


class _DemoteHeadingsTreeprocessor(markdown.treeprocessors.Treeprocessor):
    """Moves the document's headings below the page's own (a page has one h1, its title)."""

    def run(self, root: ET.Element) -> None:
        for element in root.iter():
            if re.fullmatch(r"h[1-6]", element.tag):
                element.tag = f"h{min(6, int(element.tag[1]) + HEADING_SHIFT)}"


class _SafeMarkdownExtension(markdown.extensions.Extension):
    def extendMarkdown(self, md: markdown.Markdown) -> None:  # noqa: N802 - markdown's API name
        # Without these two processors raw HTML blocks and inline tags are escaped as text.
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")
        md.treeprocessors.register(_DefangTreeprocessor(md), "mc_defang", 0)
        md.treeprocessors.register(_DemoteHeadingsTreeprocessor(md), "mc_demote_headings", 0)


def render_markdown(text: str) -> SafeString:
    """Markdown → HTML with raw HTML escaped, unsafe links removed, images defanged and
    headings demoted by HEADING_SHIFT levels (the page keeps its one h1)."""
    html = markdown.markdown(
        reveal_hidden(text),
        extensions=["fenced_code", "tables", "sane_lists", _SafeMarkdownExtension()],
        output_format="html",
    )
    return mark_safe(html)  # noqa: S308 - raw HTML was escaped by the extension above


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    return render_markdown(text or "")


@register.filter
def diff_lines(diff_text: str) -> list[tuple[str, str]]:
    """Split a unified diff into (css class, line) pairs for colouring."""
    out: list[tuple[str, str]] = []
    for line in reveal_hidden(diff_text or "").splitlines():
        if line.startswith(("+++", "---")):
            css = "mc-diff-file"
        elif line.startswith("@@"):
            css = "mc-diff-hunk"
        elif line.startswith("+"):
            css = "mc-diff-add"
        elif line.startswith("-"):
            css = "mc-diff-del"
        else:
            css = "mc-diff-ctx"
        out.append((css, line))
    return out


@register.filter
def get_item(mapping: object, key: str) -> object:
    """`mapping[key]` for dicts in templates; None when absent or not a mapping."""
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


def _short(value: object) -> str:
    # Nested values read as text too: a Python repr ({'run_id': ...}) is noise to a reviewer.
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{key} {_short(item)}" for key, item in value.items())
    return str(value)


@register.filter
def format_changes(changes: object) -> list[str]:
    """An audit row's `changes` as readable lines ("allowed_domains: [] → [api.x.com]").

    Credential entries only ever hold names and "[set]" (the services never store values).
    """
    if not isinstance(changes, dict):
        return [] if not changes else [str(changes)]
    lines: list[str] = []
    for key, value in changes.items():
        if isinstance(value, dict) and set(value) == {"from", "to"}:
            lines.append(f"{key}: {_short(value['from'])} → {_short(value['to'])}")
        elif key == "credential_values" and isinstance(value, dict):
            parts = []
            if value.get("set"):
                parts.append("set " + ", ".join(f"{n} [set]" for n in value["set"]))
            if value.get("cleared"):
                parts.append("cleared " + ", ".join(value["cleared"]))
            lines.append(f"credential values: {'; '.join(parts)}")
        else:
            lines.append(f"{key}: {_short(value)}")
    return lines
