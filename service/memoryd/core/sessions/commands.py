"""Explicit memory commands in user messages, no LLM needed: "remember that ..." saves a
persona fact (source explicit) at once; "forget ..." deletes the matching facts.

English and Spanish (voseo and tú): "remember that ...", "please remember ...", "don't
forget that ...", "recordá que ...", "acordate de que ...", "no te olvides de que ...";
"forget ...", "olvidate de ...". A command opens the message; a question is never one, nor
is a message that talks about remembering ("I remember that ...", "¿te acordás?") or a
forget of nothing nameable ("forget it", "olvidate de eso"): tests/unit/test_commands.py
holds the near misses that must stay plain messages.

What a remembered fact is called: "key: value" names its key; "my X is Y" / "mi X es Y"
makes X the key and Y the value; anything else is a note ("note" / "nota", as Rumi's
design has it). A forget names facts by key ("olvidate de mi trabajo": key `trabajo`),
else by similarity (see Sessions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from memoryd.core.models import CommandAction
from memoryd.core.text import snake_key

Language = Literal["en", "es"]

_PLEASE_EN = r"(?:please\s*,?\s+)?"
_PLEASE_ES = r"(?:por\s+favor\s*,?\s+)?"
_F = re.IGNORECASE | re.DOTALL

# "remember that ...": the one pattern where "that" may point at a memory instead.
_REMEMBER_THAT = re.compile(_PLEASE_EN + r"remember\s+that\s+(?P<s>.+)", _F)
_REMEMBER_ES = r"(?:record[aá]|recuerda|recordad)"
# (pattern, action, language) after "remember that"; the first that matches wins.
_SOURCES: tuple[tuple[str, CommandAction, Language], ...] = (
    (r"please\s*,?\s+remember\b\s*[:,]?\s*(?P<s>.+)", CommandAction.REMEMBER, "en"),
    (r"remember\s*:\s*(?P<s>.+)", CommandAction.REMEMBER, "en"),
    (
        _PLEASE_EN + r"(?:don'?t|do\s+not)\s+forget\s+that\s+(?P<s>.+)",
        CommandAction.REMEMBER,
        "en",
    ),
    (_PLEASE_ES + _REMEMBER_ES + r"\s+que\s+(?P<s>.+)", CommandAction.REMEMBER, "es"),
    (r"(?:record[aá]|recuerda)\s*:\s*(?P<s>.+)", CommandAction.REMEMBER, "es"),
    (
        _PLEASE_ES + r"(?:acord[aá]te|acu[eé]rdate)\s+(?:de\s+)?que\s+(?P<s>.+)",
        CommandAction.REMEMBER,
        "es",
    ),
    (
        _PLEASE_ES + r"no\s+te\s+olvides\s+(?:de\s+)?que\s+(?P<s>.+)",
        CommandAction.REMEMBER,
        "es",
    ),
    (_PLEASE_EN + r"forget\s+(?:about\s+)?(?P<s>.+)", CommandAction.FORGET, "en"),
    (
        # Not "olvida": that is also "he forgets" ("olvida las llaves siempre").
        _PLEASE_ES + r"(?:olv[ií]d[aá]te|olvidá|olvidad)\s+(?:de\s+)?(?P<s>.+)",
        CommandAction.FORGET,
        "es",
    ),
)
_PATTERNS: tuple[tuple[re.Pattern[str], CommandAction, Language], ...] = (
    (_REMEMBER_THAT, CommandAction.REMEMBER, "en"),
    *((re.compile(p, _F), action, lang) for p, action, lang in _SOURCES),
)

# "Remember that time we ...": "that" points at a memory; no fact follows.
_DEICTIC = re.compile(
    r"(?:time|day|night|morning|evening|week|weekend|year|summer|winter|place|trip|movie|"
    r"film|song|book|guy|girl|man|woman|restaurant|party|game|thing)\b",
    re.IGNORECASE,
)
# What a forget points at when it names nothing: "forget it", "olvidate de eso".
_NOTHING = frozenset(
    {
        "it",
        "that",
        "this",
        "them",
        "you",
        "me",
        "everything",
        "all",
        "all that",
        "all of that",
        "all of it",
        "it all",
        "what i said",
        "eso",
        "esto",
        "ello",
        "todo",
        "todo eso",
        "lo que dije",
        "lo que te dije",
        "lo anterior",
    }
)
_CLAUSE_END = re.compile(r"\s*(?:[,;:]|\s-\s|\s—\s)\s*")
_POLITE_TAIL = re.compile(
    r"[\s,]*(?:please|thanks|thank you|por favor|gracias)?[\s.!]*$", re.IGNORECASE
)
_LEADING_FILLER = re.compile(
    r"^(?:(?:my|our|the|about|that|mi|mis|nuestro|nuestra|el|la|los|las|lo|de|del|que)\s+)+",
    re.IGNORECASE,
)
_LETTERS = r"[^\W\d_]+"
_KEYED = re.compile(rf"(?P<k>{_LETTERS}(?:[ _-]{_LETTERS}){{0,3}})\s*:\s*(?P<v>\S.*)", _F)
_MY_EN = re.compile(
    rf"my\s+(?P<k>{_LETTERS}(?:\s+{_LETTERS}){{0,2}})\s+(?:is|are)\s+(?P<v>\S.*)", _F
)
_MY_ES = re.compile(
    rf"mis?\s+(?P<k>{_LETTERS}(?:\s+{_LETTERS}){{0,2}})\s+(?:es|son)\s+(?P<v>\S.*)", _F
)
_NOTE_KEY: dict[Language, str] = {"en": "note", "es": "nota"}


@dataclass(frozen=True)
class Command:
    action: CommandAction
    # What the command is about, as said ("I prefer TypeScript", "mi trabajo").
    subject: str
    language: Language

    def fact(self) -> tuple[str, str]:
        """The key and value a remember command saves."""
        for pattern in (_KEYED, _MY_EN if self.language == "en" else _MY_ES):
            if m := pattern.fullmatch(self.subject):
                return snake_key(m["k"]), m["v"].strip()
        return self.fact_as_note()

    def fact_as_note(self) -> tuple[str, str]:
        return _NOTE_KEY[self.language], self.subject

    def keys(self) -> list[str]:
        """The fact keys a forget command may name, most specific first."""
        bare = _LEADING_FILLER.sub("", self.subject).strip()
        return list(dict.fromkeys(k for k in (snake_key(bare), snake_key(self.subject)) if k))


def _trimmed(text: str) -> str:
    return _POLITE_TAIL.sub("", text.strip()).strip()


def parse_command(text: str) -> Command | None:
    """The command `text` (a user message) opens with, or None for a plain message."""
    message = text.strip().lstrip("¡").strip()
    if not message or message.startswith("¿") or message.rstrip(" .!").endswith("?"):
        return None  # questions ask about memory; they do not command it
    for pattern, action, language in _PATTERNS:
        m = pattern.fullmatch(message)
        if m is None:
            continue
        subject = _trimmed(m["s"])
        if action is CommandAction.FORGET:
            subject = _CLAUSE_END.split(subject, maxsplit=1)[0].strip()
            subject = re.sub(r"^(?:that|que)\s+", "", subject, flags=re.IGNORECASE)
            if subject.casefold() in _NOTHING or not snake_key(subject):
                return None
        elif pattern is _REMEMBER_THAT and _DEICTIC.match(subject):
            return None
        if not re.search(r"\w", subject):
            return None
        return Command(action, subject, language)
    return None
