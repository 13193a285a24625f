"""Deterministic review of a skill's files: what they reference and what looks dangerous (what
changed between two versions is :mod:`.version_diff`).

Everything here is plain text analysis of the files as stored; nothing is executed, fetched or
trusted. A reviewer sees these facts before deciding, and the sandbox still enforces the policy.

**Credentials** (names of environment variables / vault entries the files use):

* ``process.env.X``, ``process.env["X"]``, ``process.env['X']``, ``const { X } = process.env``
  (JavaScript/TypeScript; also ``Bun.env`` and ``Deno.env.get("X")``)
* ``os.environ["X"]``, ``os.environ['X']``, ``os.environ.get("X")``, ``os.getenv("X")`` (Python,
  with or without the ``os.`` prefix)
* ``os.Getenv("X")`` (Go), ``env::var("X")`` (Rust), ``System.getenv("X")`` (Java),
  ``ENV["X"]`` / ``ENV.fetch("X")`` (Ruby)
* ``${X}`` / ``${X:-default}`` and ``$X`` inside fenced ``bash``/``sh``/``zsh``/``shell``
  blocks, and in whole shell scripts (``*.sh``/``*.bash``/``*.zsh`` or a ``#!…sh`` shebang).
  Shell references count only for UPPERCASE names (lowercase shell names are local variables
  by convention) that the same block or script does not itself assign (``X=…``, ``export X=``,
  ``for X in``, ``read X``).
* ``VAULT_X`` anywhere. The name is reported as written (``VAULT_X``) and
  ``vault_aliases`` notes that it maps to the vault credential ``X``; a declared credential
  covers a reference when the two are equal ignoring case and a leading ``VAULT_``.

Shell specials (``$0``-``$9``, ``$?``, ``$!``, ``$@``, ``$#``, ``$$``, ``$*``, ``$-``,
``$_``) and well-known non-secret variables (:data:`WELL_KNOWN_VARS`) are never reported.

**Domains**: the host of every ``http(s)://``, ``ws(s)://``, ``ftp(s)://`` and ``sftp://`` URL,
parsed with :mod:`urllib.parse`, and every host name written without a scheme in prose, shell
lines or code strings (:mod:`.hosts`: public-suffix-aware, file names and attribute chains left
out); lowercased, IDNA-encoded, without a trailing dot; placeholder hosts (``localhost``,
``example.com``/``.org``/``.net`` and their subdomains, the reserved ``.example``, ``.test``,
``.invalid`` and ``.localhost`` TLDs, ``your-*`` hosts, loopback and unspecified addresses) are
left out. A declared domain covers a host when equal, or when it is ``*.parent`` and the host is
below ``parent``.

Binary files (any NUL byte) are inventoried but not scanned as text; a zip among them is
still checked for password-protected entries.
"""

from __future__ import annotations

import io
import ipaddress
import json
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict
from urllib.parse import urlsplit

from .hashing import content_hash, sha256_hex
from .hosts import bare_hosts
from .lookalike import lookalike_findings
from .manifest import parse_manifest
from .pattern_scan import suspicious_findings
from .skillmd import parse_skill_md
from .skillmd import spec_findings as _spec_findings
from .types import SKILL_MD, SKILL_TOML, Bundle, BundleError, Finding, as_file_map

WELL_KNOWN_VARS = frozenset(
    {
        "HOME", "PATH", "PWD", "OLDPWD", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE",
        "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TMP", "TEMP", "TZ", "HOSTNAME", "EDITOR",
        "VISUAL", "PAGER", "DISPLAY", "COLUMNS", "LINES", "SHLVL", "IFS", "PS1", "PS2", "PS4",
        "RANDOM", "SECONDS", "LINENO", "UID", "EUID", "GID", "PPID", "BASHPID", "BASH",
        "BASH_SOURCE", "BASH_VERSION", "BASH_REMATCH", "FUNCNAME", "PIPESTATUS", "OPTARG",
        "OPTIND", "REPLY", "HISTFILE", "NODE_ENV", "NODE_PATH", "NODE_OPTIONS", "NPM_CONFIG_PREFIX",
        "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV",
        "CI", "DEBUG", "PORT", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
        "XDG_RUNTIME_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "SSL_CERT_FILE",
        "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GOPATH", "GOROOT", "JAVA_HOME",
        "CARGO_HOME", "RUSTUP_HOME", "WORKSPACE", "OSTYPE", "MACHTYPE", "HOSTTYPE",
    }
)  # fmt: skip
SHELL_SPECIALS = frozenset({*"0123456789", "?", "!", "@", "#", "$", "*", "-", "_"})

PLACEHOLDER_HOSTS = frozenset(
    {
        "localhost", "example.com", "example.org", "example.net", "api.example.com",
        "your-server.com", "your-domain.com", "yourdomain.com", "yourserver.com",
        "yourcompany.com", "your-company.com", "yoursite.com", "your-site.com", "your-api.com",
        "127.0.0.1", "0.0.0.0", "::1", "::",
    }
)  # fmt: skip
_PLACEHOLDER_PARENTS = ("example.com", "example.org", "example.net", "localhost")
_RESERVED_TLDS = ("example", "test", "invalid", "localhost")

_SHELL_LANGS = frozenset({"bash", "sh", "zsh", "shell"})
_SHELL_SUFFIXES = (".sh", ".bash", ".zsh")
_SHEBANG = re.compile(r"^#!\s*\S*?(?:/env\s+)?(?:ba|z|da|k)?sh\b")
# Any indentation: fences nested in list items are indented past CommonMark's 3 spaces.
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*\{?\.?([^\s`{}]*)")

_NAME = r"([A-Za-z_][A-Za-z0-9_]*)"
_QUOTED = r"\s*[\"'`]" + _NAME + r"[\"'`]"
_ENV_PATTERNS = [
    # JavaScript / TypeScript (Node, Bun, Deno)
    re.compile(r"\b(?:process|Bun)\.env\." + _NAME),
    re.compile(r"\b(?:process|Bun)\.env\[" + _QUOTED + r"\s*\]"),
    re.compile(r"\bDeno\.env\.get\(" + _QUOTED),
    # Python (os.environ / os.getenv, also after "from os import environ, getenv")
    re.compile(r"(?<![\w.])(?:os\.)?environ\[" + _QUOTED + r"\s*\]"),
    re.compile(r"(?<![\w.])(?:os\.)?environ\.get\(" + _QUOTED),
    re.compile(r"(?<![\w.])(?:os\.)?getenv\(" + _QUOTED),
    # Go, Rust, Java, Ruby
    re.compile(r"\bos\.(?:Getenv|LookupEnv)\(" + _QUOTED),
    re.compile(r"\benv::var(?:_os)?\(" + _QUOTED),
    re.compile(r"\bSystem\.getenv\(" + _QUOTED),
    re.compile(r"(?<![\w.])ENV(?:\[|\.fetch\()" + _QUOTED),
]
# const { A, B: alias } = process.env  — every destructured name is a reference
_DESTRUCTURED_ENV = re.compile(r"\{([\w\s,:]{1,2000}?)\}\s*=\s*(?:process|Bun)\.env\b")
_VAULT = re.compile(r"(?<![A-Za-z0-9_])VAULT_[A-Za-z0-9_]+")
_SHELL_BRACED = re.compile(r"\$\{#?([A-Za-z_][A-Za-z0-9_]*)")
_SHELL_PLAIN = re.compile(r"(?<!\\)\$([A-Za-z_][A-Za-z0-9_]*)")
_SHELL_ASSIGNED = [
    re.compile(
        r"(?m)^\s*(?:export\s+|local\s+|readonly\s+|declare\s+(?:-\w+\s+)*)?"
        r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?\+?="
    ),
    re.compile(r"(?m)\bfor\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\b"),
]
# `read [-opts] NAME...` up to the end of the command; every bare word there counts as assigned.
_SHELL_READ = re.compile(r"\bread\b([^;&|\n]*)")
_BARE_WORD = re.compile(r"(?<![-\w$])([A-Za-z_][A-Za-z0-9_]*)")
_URL = re.compile(r"(?i)(?<![A-Za-z0-9])(?:https?|wss?|ftps?|sftp)://[^\s<>\"'`\\(){}\[\]|^]+")
_HOST_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+$")


# -- suspicious patterns ------------------------------------------------------------------------
# The rule table lives in malware_rules and its scanner in pattern_scan; this module adds what needs the file as
# a whole (encrypted zips among binary files, hosts in URLs).


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _encrypted_zip(path: str, data: bytes) -> list[Finding]:
    if not data.startswith(b"PK\x03\x04"):
        return []
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            encrypted = [i.filename for i in archive.infolist() if i.flag_bits & 0x1]
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return []
    if not encrypted:
        return []
    return [
        Finding(
            path,
            "password-protected-archive",
            f"zip archive with {len(encrypted)} password-protected entries (contents cannot "
            "be reviewed)",
            "danger",
        )
    ]


# -- references ---------------------------------------------------------------------------------


def _shell_segments(path: str, text: str) -> tuple[list[str], bool]:
    """Shell code in a file: fenced shell blocks, or the whole file if it is a shell script."""
    if path.lower().endswith(_SHELL_SUFFIXES) or _SHEBANG.match(text):
        return [text], False
    segments: list[str] = []
    has_block = False
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opened = _FENCE_OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, lang = opened.group(1), opened.group(2).lower()
        closing = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        if lang in _SHELL_LANGS:
            has_block = True
            segments.append("\n".join(lines[i + 1 : j]))
        i = j + 1
    return segments, has_block


def _shell_credentials(code: str) -> set[str]:
    assigned = {m.group(1) for regex in _SHELL_ASSIGNED for m in regex.finditer(code)}
    for command in _SHELL_READ.finditer(code):
        assigned |= {m.group(1) for m in _BARE_WORD.finditer(command.group(1))}
    names = {m.group(1) for m in _SHELL_BRACED.finditer(code)}
    names |= {m.group(1) for m in _SHELL_PLAIN.finditer(code)}
    return {
        name
        for name in names
        if name not in assigned and name == name.upper() and any(c.isalpha() for c in name)
    }


def _credentials(path: str, text: str) -> tuple[set[str], bool]:
    names: set[str] = set()
    for regex in _ENV_PATTERNS:
        names.update(m.group(1) for m in regex.finditer(text))
    for match in _DESTRUCTURED_ENV.finditer(text):
        for part in match.group(1).split(","):
            name = part.split(":", 1)[0].strip()
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                names.add(name)
    names.update(m.group(0) for m in _VAULT.finditer(text))
    segments, has_block = _shell_segments(path, text)
    for code in segments:
        names |= _shell_credentials(code)
    names = {n for n in names if n not in WELL_KNOWN_VARS and n not in SHELL_SPECIALS}
    return names, has_block


def normalise_host(raw_host: str) -> str | None:
    """Lowercase, IDNA-encode and validate a URL host; None if it is not a usable host."""
    host = raw_host.strip().rstrip(".").lower()
    if not host:
        return None
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return ip.compressed
    try:
        host = host.encode("idna").decode("ascii")
    except (UnicodeError, ValueError):
        return None
    return host if _HOST_RE.match(host) else None


def is_placeholder_host(host: str) -> bool:
    """Hosts that documentation uses as stand-ins and that never need network access."""
    if host in PLACEHOLDER_HOSTS:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return ip.is_loopback or ip.is_unspecified
    if any(host.endswith("." + parent) for parent in _PLACEHOLDER_PARENTS):
        return True
    labels = host.split(".")
    if labels[-1] in _RESERVED_TLDS:
        return True
    return any(label.startswith("your-") or label.startswith("your_") for label in labels)


def _domains(path: str, text: str) -> tuple[set[str], list[Finding]]:
    hosts: set[str] = set()
    findings: list[Finding] = []
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(".,;:!?*_~")  # sentence and markdown emphasis ends
        try:
            raw_host = urlsplit(url).hostname
        except ValueError:
            continue
        if not raw_host:
            continue
        host = normalise_host(raw_host)
        if host is None or is_placeholder_host(host):
            continue
        hosts.add(host)
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            if "xn--" in host:
                findings.append(
                    Finding(
                        path,
                        "idn-host",
                        f"line {_line_of(text, match.start())}: internationalised host "
                        f"{raw_host!r} (shown as {host}); check it is not a look-alike",
                        "warning",
                    )
                )
            continue
        findings.append(_raw_ip_finding(path, _line_of(text, match.start()), ip))
    for _, raw_host in bare_hosts(path, text):
        host = normalise_host(raw_host)
        if host is not None and not is_placeholder_host(host):
            hosts.add(host)
    return hosts, findings


# The networks of a home or office LAN: a device there (a router, a Home Assistant) is a fact the
# reviewer should know (private egress must be allowed), not a sign of malware.
_LAN_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)


def _raw_ip_finding(
    path: str, line: int, ip: ipaddress.IPv4Address | ipaddress.IPv6Address
) -> Finding:
    where = f"line {line}: URL with a raw IP address {ip.compressed}"
    if ip.is_link_local:
        return Finding(
            path,
            "raw-ip-url",
            where + " (link-local: cloud metadata endpoints live here)",
            "danger",
        )
    if any(ip in network for network in _LAN_NETWORKS):
        return Finding(path, "raw-ip-url", where + " (a private network address)", "info")
    return Finding(
        path,
        "raw-ip-url",
        where,
        "warning",
        why="a bare public IP has no owner to check; malware payloads are often served from one",
    )


# -- facts --------------------------------------------------------------------------------------


class InventoryEntry(TypedDict):
    path: str
    size: int
    sha256_12: str
    binary: bool


def _declared_key(name: str) -> str:
    lowered = name.strip().lower()
    return lowered.removeprefix("vault_")


def _domain_covered(host: str, declared: Iterable[str]) -> bool:
    for entry in declared:
        # an entry's ":port" scopes the port, not the host it names
        allowed = re.sub(r":[0-9]+$", "", entry.strip().lower()).rstrip(".")
        if allowed == host:
            return True
        if allowed.startswith("*.") and host.endswith(allowed[1:]):
            return True
    return False


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str)) if value is not None else None


_SEVERITY_ORDER = {"danger": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class ReviewFacts:
    """The deterministic review of one set of skill files (see the module docstring)."""

    suspicious: list[Finding]
    referenced_credentials: list[str]
    referenced_domains: list[str]
    inventory: list[InventoryEntry]
    has_scripts: bool
    has_shell_blocks: bool
    provenance: dict[str, Any] | None
    mismatches: list[dict[str, str]]
    content_hash: str
    vault_aliases: dict[str, str] = field(default_factory=dict)
    credential_sources: dict[str, list[str]] = field(default_factory=dict)
    domain_sources: dict[str, list[str]] = field(default_factory=dict)
    declared_domains: list[str] = field(default_factory=list)
    declared_credentials: list[str] = field(default_factory=list)
    spec_findings: list[Finding] = field(default_factory=list)
    #: an MCP skill's skill.toml read for the reviewer (`_mcp_facts`); None for other skills
    mcp: dict[str, Any] | None = None

    @property
    def has_danger(self) -> bool:
        return any(f.severity == "danger" for f in self.suspicious)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form; suspicious findings come first."""
        return {
            "suspicious": [f.to_dict() for f in self.suspicious],
            "referenced_credentials": list(self.referenced_credentials),
            "referenced_domains": list(self.referenced_domains),
            "mismatches": [dict(m) for m in self.mismatches],
            "inventory": [dict(entry) for entry in self.inventory],
            "has_scripts": self.has_scripts,
            "has_shell_blocks": self.has_shell_blocks,
            "provenance": _json_safe(self.provenance),
            "content_hash": self.content_hash,
            "vault_aliases": dict(self.vault_aliases),
            "credential_sources": {k: list(v) for k, v in self.credential_sources.items()},
            "domain_sources": {k: list(v) for k, v in self.domain_sources.items()},
            "declared_domains": list(self.declared_domains),
            "declared_credentials": list(self.declared_credentials),
            **({"mcp": _json_safe(self.mcp)} if self.mcp is not None else {}),
            "spec_findings": [f.to_dict() for f in self.spec_findings],
        }


def review_bundle(
    files: Mapping[str, bytes] | Bundle,
    *,
    declared_domains: Iterable[str] = (),
    declared_credentials: Iterable[str] = (),
    provenance: dict[str, Any] | None = None,
    skill_name: str | None = None,
    installed_names: Iterable[str] = (),
) -> ReviewFacts:
    """Review a skill's files against what its policy declares.

    ``files`` is a Bundle or ``{relative path: bytes}`` (policy.json, if present, is ignored).
    ``spec_findings`` is the strict Agent Skills report on SKILL.md (what the lenient parser
    tolerated plus every spec deviation); ``skill_name``, when given, is the directory name
    the spec wants the ``name`` field to equal. ``installed_names`` are the other installed
    skills: a name that imitates one of them (:mod:`.lookalike`) is a suspicious finding.
    """
    file_map = as_file_map(files)
    declared_domains = sorted({d.strip().lower() for d in declared_domains if d.strip()})
    declared_credentials = sorted({c.strip() for c in declared_credentials if c.strip()})
    credential_sources: dict[str, set[str]] = {}
    domain_sources: dict[str, set[str]] = {}
    suspicious: list[Finding] = []
    inventory: list[InventoryEntry] = []
    has_shell_blocks = False
    for path in sorted(file_map, key=lambda p: p.encode("utf-8")):
        data = file_map[path]
        binary = b"\0" in data
        inventory.append(
            {"path": path, "size": len(data), "sha256_12": sha256_hex(data)[:12], "binary": binary}
        )
        if binary:
            suspicious.extend(_encrypted_zip(path, data))
            continue
        text = data.decode("utf-8", errors="replace")
        if text.startswith("\ufeff"):
            text = text[1:]
        text = text.replace("\r\n", "\n")
        names, block = _credentials(path, text)
        has_shell_blocks = has_shell_blocks or block
        for name in names:
            credential_sources.setdefault(name, set()).add(path)
        hosts, host_findings = _domains(path, text)
        for host in hosts:
            domain_sources.setdefault(host, set()).add(path)
        suspicious.extend(host_findings)
        suspicious.extend(suspicious_findings(path, text))

    referenced_credentials = sorted(credential_sources)
    referenced_domains = sorted(domain_sources)
    vault_aliases = {
        name: name[len("VAULT_") :] for name in referenced_credentials if name.startswith("VAULT_")
    }

    mismatches: list[dict[str, str]] = []
    for host in referenced_domains:
        if not _domain_covered(host, declared_domains):
            mismatches.append({"kind": "domain_not_declared", "category": "domain", "value": host})
    declared_keys = {_declared_key(c) for c in declared_credentials}
    for name in referenced_credentials:
        if _declared_key(name) not in declared_keys:
            mismatches.append(
                {"kind": "credential_not_declared", "category": "credential", "value": name}
            )
    for entry in declared_domains:
        allowed = entry.rstrip(".")
        if not any(_domain_covered(host, [allowed]) for host in referenced_domains):
            mismatches.append(
                {"kind": "declared_but_unreferenced", "category": "domain", "value": entry}
            )
    referenced_keys = {_declared_key(n) for n in referenced_credentials}
    for cred in declared_credentials:
        if _declared_key(cred) not in referenced_keys:
            mismatches.append(
                {"kind": "declared_but_unreferenced", "category": "credential", "value": cred}
            )

    suspicious.extend(
        lookalike_findings(skill_name or _frontmatter_name(file_map), installed_names)
    )
    suspicious.sort(key=lambda f: (_SEVERITY_ORDER[f.severity], f.path.encode("utf-8")))
    return ReviewFacts(
        suspicious=suspicious,
        referenced_credentials=referenced_credentials,
        referenced_domains=referenced_domains,
        inventory=inventory,
        has_scripts=any(p.startswith("scripts/") for p in file_map),
        has_shell_blocks=has_shell_blocks,
        provenance=_json_safe(provenance),
        mismatches=mismatches,
        content_hash=content_hash(file_map.items()),
        vault_aliases=vault_aliases,
        credential_sources={k: sorted(v) for k, v in sorted(credential_sources.items())},
        domain_sources={k: sorted(v) for k, v in sorted(domain_sources.items())},
        declared_domains=declared_domains,
        declared_credentials=declared_credentials,
        spec_findings=_spec_report(file_map.get(SKILL_MD), skill_name),
        mcp=_mcp_facts(file_map, domain_sources, credential_sources),
    )


def _mcp_facts(
    file_map: Mapping[str, bytes],
    domain_sources: Mapping[str, set[str]],
    credential_sources: Mapping[str, set[str]],
) -> dict[str, Any] | None:
    """What an MCP skill's skill.toml proposes, and where it disagrees with the code.

    The proposal (domains, vault credentials, limits, tool semantics) is shown for the decision;
    it is never an approval. ``mismatches`` lists hosts the files reference that the manifest
    does not allow (``domain_not_in_manifest``), allowed domains no file references
    (``manifest_domain_unreferenced``) and credentials read from the environment that ``[auth]``
    does not provide (``credential_not_in_manifest``). A manifest that does not parse yields its
    problems instead (a stored bundle always parses: assembling refuses a bad one)."""
    raw = file_map.get(SKILL_TOML)
    if raw is None:
        return None
    manifest, problems = parse_manifest(raw, files=file_map)
    if manifest is None:
        return {"problems": [p.to_dict() for p in problems]}
    code_hosts = sorted(h for h, paths in domain_sources.items() if set(paths) - {SKILL_TOML})
    mismatches: list[dict[str, str]] = [
        {"kind": "domain_not_in_manifest", "category": "domain", "value": host}
        for host in code_hosts
        if not _domain_covered(host, manifest.allowed_domains)
    ]
    mismatches += [
        {"kind": "manifest_domain_unreferenced", "category": "domain", "value": entry}
        for entry in manifest.allowed_domains
        if not any(_domain_covered(host, [entry]) for host in code_hosts)
    ]
    provided = set(manifest.auth)
    mismatches += [
        {"kind": "credential_not_in_manifest", "category": "credential", "value": name}
        for name in sorted(credential_sources)
        if name not in provided and set(credential_sources[name]) - {SKILL_TOML}
    ]
    return {
        "manifest": manifest.to_dict(),
        "proposal": manifest.proposal(),
        "server_script": manifest.server_script,
        "mismatches": mismatches,
    }


def _frontmatter_name(file_map: Mapping[str, bytes]) -> str | None:
    try:
        name = parse_skill_md(file_map[SKILL_MD]).frontmatter.get("name")
    except (KeyError, BundleError):
        return None
    return name if isinstance(name, str) else None


def _spec_report(skill_md: bytes | None, skill_name: str | None) -> list[Finding]:
    """Findings of the lenient parse plus the strict spec report (problems become danger)."""
    if skill_md is None:
        return [Finding(SKILL_MD, "skill-md-missing", "there is no SKILL.md", "danger")]
    try:
        parsed = parse_skill_md(skill_md)
    except BundleError as exc:
        return [Finding(p.path, p.rule, p.message, "danger") for p in exc.problems]
    return [*parsed.findings, *_spec_findings(parsed.frontmatter, skill_name)]
