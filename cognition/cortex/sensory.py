"""Signal words of a task (seed 003 §4.2) and how a task is matched against a region's pattern.

A signal word says what kind of work a task is, never which thing it is about: concrete entities
(people, companies, places, dates, numbers, file names, URLs, e-mail addresses) are removed
before anything is stored. What is left is mapped to a canonical verb where one applies ("look
up", "find", "search" → "query") and cut to at most four words, verbs first.

Entities are recognised by their form, no model involved:
- URLs, e-mail addresses, file names (`name.ext`), anything with a digit (Q3, 2025, 42 kB);
- month and weekday names and relative days (today, tomorrow);
- capitalised words: inside a sentence a capital marks a proper name; a sentence's first word
  counts as a word only when it is a known action verb ("Look", "Convert"), so an entity-only
  task ("Alice Q3 2025") leaves nothing;
- all-capital words of two or more letters (IBM, NYC, USD) and possessives (Alice's).
"""

from __future__ import annotations

import re

from skills.index.text import STOPWORDS, tokenize

#: most signal words taken from one task (the seed's 2–4)
MAX_TASK_SIGNALS = 4
#: shortest signal word kept, in characters
MIN_SIGNAL_CHARS = 3

#: phrases (two words) and words that name the same action, mapped to one canonical verb
_PHRASES = {
    "look up": "query",
    "find out": "query",
    "check on": "query",
    "set up": "create",
    "sign up": "create",
    "clean up": "delete",
    "write up": "create",
}
_VERBS = {
    "lookup": "query",
    "find": "query",
    "search": "query",
    "fetch": "query",
    "retrieve": "query",
    "query": "query",
    "check": "query",
    "list": "list",
    "show": "query",
    "get": "query",
    "create": "create",
    "add": "create",
    "new": "create",
    "make": "create",
    "write": "create",
    "draft": "create",
    "generate": "create",
    "update": "update",
    "edit": "update",
    "change": "update",
    "modify": "update",
    "rename": "update",
    "delete": "delete",
    "remove": "delete",
    "erase": "delete",
    "send": "send",
    "email": "send",
    "mail": "send",
    "post": "send",
    "convert": "convert",
    "transform": "convert",
    "translate": "translate",
    "summarize": "summarize",
    "summarise": "summarize",
    "analyze": "analyze",
    "analyse": "analyze",
    "compare": "compare",
    "download": "download",
    "upload": "upload",
    "resize": "resize",
    "compress": "compress",
    "extract": "extract",
    "parse": "parse",
    "schedule": "schedule",
    "book": "book",
    "remind": "remind",
    "track": "track",
    "monitor": "monitor",
    "calculate": "calculate",
    "plan": "plan",
    "read": "read",
    "review": "review",
    "publish": "publish",
    "sync": "sync",
    "backup": "backup",
    "merge": "merge",
    "split": "split",
    "sort": "sort",
    "format": "format",
    "run": "run",
    "open": "open",
    "build": "build",
    "deploy": "deploy",
    "test": "test",
    "fix": "fix",
    "record": "record",
    "tell": "query",
    "give": "query",
    "what": "query",
}
_CANONICAL = frozenset(_VERBS.values())
#: words that carry no kind of work and that the index's stop list lets through
_FILLER = frozenset(
    "about above across after again against also along among around because before behind "
    "below between beyond both during each either every from into just many more most much "
    "near other over same since some such than that then there these they this those through "
    "under until upon very while with within without".split()
)
_DATE_WORDS = frozenset(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
    "saturday sunday mon tue wed thu fri sat sun today tomorrow yesterday tonight".split()
)
_URL = re.compile(r"(?:[a-z][a-z0-9+.-]*://|www\.)\S+", re.IGNORECASE)
_EMAIL = re.compile(r"\S+@\S+\.\S+")
_FILE = re.compile(r"\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,4}\b")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]|[A-Za-z]|\S*\d\S*")
_SENTENCE_END = re.compile(r"[.!?;:\n]")


def _words(task: str) -> list[tuple[str, bool]]:
    """(word, starts a sentence) for each word of `task` once URLs, e-mails and file names are
    cut out (each leaves a sentence break, so the word after it is not taken for a name)."""
    text = _EMAIL.sub(" . ", _URL.sub(" . ", task))
    text = _FILE.sub(" . ", text)
    out: list[tuple[str, bool]] = []
    start = True
    pos = 0
    for match in _WORD.finditer(text):
        if _SENTENCE_END.search(text, pos, match.start()):
            start = True
        out.append((match.group(0), start))
        start = False
        pos = match.end()
    return out


def _is_entity(word: str, *, sentence_start: bool) -> bool:
    lowered = word.lower()
    if any(c.isdigit() for c in word) or lowered in _DATE_WORDS:
        return True
    if word.endswith(("'s", "’s")) and word[0].isupper():
        return True
    if len(word) >= 2 and word.isupper():
        return True
    if word[0].isupper():
        # A capital inside a sentence is a name; at its start, only a known verb is a word.
        return not (sentence_start and lowered in _VERBS)
    return False


def signal_words(task: str) -> list[str]:
    """At most four signal words of `task`, canonical verbs first, no concrete entity, no
    repeats; [] when nothing but entities and filler is left ("Alice Q3 2025")."""
    kept: list[str] = []
    words = _words(task[:10_000])  # a signal is in a task's first lines, never its 100 kB tail
    i = 0
    while i < len(words):
        word, start = words[i]
        if i + 1 < len(words):
            pair = f"{word.lower()} {words[i + 1][0].lower()}"
            if pair in _PHRASES and not (word[0].isupper() and not start):
                kept.append(_PHRASES[pair])
                i += 2
                continue
        i += 1
        if _is_entity(word, sentence_start=start):
            continue
        lowered = word.lower().strip("'’-")
        if lowered in _VERBS:
            kept.append(_VERBS[lowered])
        elif (
            lowered not in STOPWORDS
            and lowered not in _FILLER
            and len(lowered) >= MIN_SIGNAL_CHARS
            and lowered.isalpha()
        ):
            kept.append(lowered)
    unique = list(dict.fromkeys(kept))
    verbs = [w for w in unique if w in _CANONICAL]
    nouns = [w for w in unique if w not in _CANONICAL]
    return (verbs[:1] + nouns + verbs[1:])[:MAX_TASK_SIGNALS]


def task_terms(task: str) -> set[str]:
    """The stemmed terms a task is matched with: its words (verbs mapped to canonical ones) in
    the skill index's tokenizer, so "reports" meets "report"."""
    words = [w.lower() for w, _ in _words(task[:10_000])]
    mapped = []
    i = 0
    while i < len(words):
        if i + 1 < len(words) and f"{words[i]} {words[i + 1]}" in _PHRASES:
            mapped.append(_PHRASES[f"{words[i]} {words[i + 1]}"])
            i += 2
            continue
        mapped.append(_VERBS.get(words[i].strip("'’-"), words[i]))
        i += 1
    return set(tokenize(" ".join(mapped)))


def pattern_terms(signals: list[str]) -> set[str]:
    """The stemmed terms of a region's pattern."""
    return set(tokenize(" ".join(signals)))


def pattern_merge(existing: list[str], new: list[str], *, limit: int) -> list[str]:
    """`existing` plus the words of `new` it lacks, newest last, the oldest dropped past
    `limit` (seed §4.6: at most 10 signals per pattern)."""
    merged = list(dict.fromkeys([*existing, *[w for w in new if w not in existing]]))
    return merged[-limit:] if len(merged) > limit else merged


def region_name_for(signals: list[str], *, fallback: str) -> str:
    """A region's name from a task's signal words: its nouns (or all words), dash-joined;
    `fallback` (the skill's name) when there are none."""
    nouns = [w for w in signals if w not in _CANONICAL] or signals
    return "-".join(nouns[:3])[:100] if nouns else fallback[:100]
