"""Skill names that imitate an installed skill's name (``c1awhub-tools`` beside ``clawhub-tools``).

Confusable Unicode is refused when a skill is parsed; this catches the ASCII tricks that stay:

* the same name once look-alike characters are folded: ``1``/``|`` → ``l``, ``0`` → ``o``,
  ``5`` → ``s``, ``3`` → ``e``, ``4`` → ``a``, ``7`` → ``t``, ``8`` → ``b``, ``rn`` → ``m``,
  ``vv`` → ``w``, ``cl`` → ``d``, and hyphens, underscores and dots dropped;
* or one edit away (insert, delete, replace, swap two neighbours), for names of 5 characters or
  more so that short names (``git``/``gif``) are not flagged.
"""

from __future__ import annotations

from collections.abc import Iterable

from .types import SKILL_MD, Finding

_FOLDS = (("rn", "m"), ("vv", "w"), ("cl", "d"))
_CHARS = str.maketrans({"1": "l", "|": "l", "0": "o", "5": "s", "3": "e", "4": "a",
                        "7": "t", "8": "b", "-": None, "_": None, ".": None})  # fmt: skip
_MIN_LENGTH = 5


def skeleton(name: str) -> str:
    """The name with look-alike characters folded to one representative."""
    folded = name.lower().translate(_CHARS)
    for pair, single in _FOLDS:
        folded = folded.replace(pair, single)
    return folded


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance of ``a`` and ``b``, or ``limit + 1`` if above ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, start=1):
            cost = 0 if ca == cb else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return min(previous[-1], limit + 1)


def imitated(name: str, installed: Iterable[str]) -> list[tuple[str, str]]:
    """(installed name, how it is imitated) for each installed name that ``name`` looks like."""
    mine = skeleton(name)
    found: list[tuple[str, str]] = []
    for other in sorted(set(installed)):
        if other == name:
            continue
        theirs = skeleton(other)
        if mine == theirs:
            found.append((other, "the same name once look-alike characters are folded"))
            continue
        if min(len(name), len(other)) < _MIN_LENGTH:
            continue
        if edit_distance(mine, theirs, 1) <= 1:
            found.append((other, "one edit away"))
    return found


def lookalike_findings(name: str | None, installed: Iterable[str]) -> list[Finding]:
    """A warning for each installed skill whose name ``name`` imitates."""
    if not name:
        return []
    return [
        Finding(
            SKILL_MD,
            "look-alike-name",
            f"the name {name!r} looks like the installed skill {other!r} ({how}); check this is "
            f"not an impostor of {other!r}",
            "warning",
            why="typosquatted names (clawhub1, cllawhub, polymarket-traiding-bot) carried "
            "malware next to the skills they imitated",
        )
        for other, how in imitated(name, installed)
    ]
