"""Tokenizing for the lexical index: one rule for documents and queries alike.

Lowercase; runs of letters and digits are tokens (so `exchange-rates` and `exchange_rates` give
`exchange`, `rates`); English stop words and the question words of natural-language requests
("what", "how", "my") are dropped; the rest is Snowball-stemmed (PyStemmer), so "converting" and
"conversion" meet "convert".
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
#: Words a request is phrased with that say nothing about which skill fits.
_REQUEST_WORDS = frozenset(
    {
        "please",
        "can",
        "could",
        "would",
        "want",
        "need",
        "like",
        "help",
        "me",
        "my",
        "i",
        "you",
        "your",
        "we",
        "our",
        "what",
        "whats",
        "which",
        "who",
        "how",
        "when",
        "where",
        "why",
        "is",
        "are",
        "do",
        "does",
        "get",
        "give",
        "show",
        "tell",
        "let",
        "make",
        "use",
        "using",
        "some",
        "any",
        "all",
        "thing",
        "things",
        "way",
        "something",
        "s",
        "t",
    }
)
STOPWORDS = frozenset(STOPWORDS_EN) | _REQUEST_WORDS
#: Longest token kept (a 10 kB "word" is noise, not a term).
MAX_TOKEN_CHARS = 40

_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer.stemWord(word))


def tokenize(text: str) -> list[str]:
    """The index terms of `text`, in order, repeats kept (BM25 counts them)."""
    return [
        _stem(w)
        for w in _TOKEN.findall(text.lower())
        if w not in STOPWORDS and len(w) <= MAX_TOKEN_CHARS
    ]
