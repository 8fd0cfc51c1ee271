"""Regular-expression subscriptions (KIP-848 ``SubscribedTopicRegex``) with RE2 semantics.

Theory of operation
-------------------
A consumer-protocol member may subscribe with a regular expression instead of (or besides) a
list of topic names. Kafka compiles it with Google's RE2/J (``com.google.re2j.Pattern``), not
``java.util.regex``, and so do we, through the C++ RE2 engine (PyPI ``google-re2``, import name
``re2``). Two reasons, both about client-supplied patterns:

* **Same language as Kafka.** RE2 and RE2/J implement one syntax (Go's ``regexp/syntax``):
  no backreferences (``(a)\\1``), no look-around (``(?=a)``), no possessive quantifiers,
  ``\\z`` but not ``\\Z``. Python's ``re`` accepts all of those, so a pattern a real broker
  rejects with INVALID_REGULAR_EXPRESSION would be accepted here if we used ``re``.
* **Linear time.** RE2 matches with automata, never backtracks, and bounds each compiled
  program's memory (``max_mem``, RE2's default 8 MiB, 2/3 forward program and DFA cache). A
  pattern such as ``(a+)+$`` cannot stall a shard: matching is O(len(pattern) * len(topic)).

**Full match.** Kafka resolves with ``pattern.matcher(topic).matches()``: the *whole* topic
name must match, as if the pattern were wrapped in ``^(?:...)$``. ``foo`` does not match
``foobar``; ``foo.*`` matches both ``foo`` and ``foobar``. We use RE2's ``ANCHOR_BOTH``
(``fullmatch``), which finds a full match whenever one exists (``foo|foobar`` matches
``foobar``), exactly like ``matches()``. Topic names are matched as UTF-8 bytes (what RE2 runs
on natively, and 2-3x faster in the binding than passing ``str``). Internal topics
(``__consumer_offsets``) are not filtered: Kafka does not filter them either. Results are
sorted and de-duplicated, the order Kafka writes in ``ConsumerGroupRegularExpressionValue``
(Java sorts by UTF-16 unit, Python by code point; identical for legal, ASCII, topic names).

**Validation** (:func:`validate_regex`) returns Kafka's INVALID_REGULAR_EXPRESSION message::

    SubscribedTopicRegex `[` is not a valid regular expression: missing closing ].

i.e. ``f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}."``
where ``reason`` is RE2/J's ``PatternSyntaxException.getDescription()``: the bare error
text, *without* the offending fragment (RE2/J keeps the fragment in ``getPattern()`` and in
``getMessage()``, which Kafka does not use). RE2 (C++) reports ``"<code text>: <fragment>"``;
we keep the code text and translate it to RE2/J's wording with :data:`RE2_TO_RE2J_ERRORS`:

=========================================  ==================================================
RE2 (C++) error code text                  RE2/J description (what Kafka puts in the message)
=========================================  ==================================================
missing ]                                  missing closing ]
missing )                                  missing closing )
unexpected )                               regexp/syntax: internal error  [1]
no argument for repetition operator        missing argument to repetition operator
bad repetition operator                    invalid nested repetition operator
invalid repetition size                    invalid repeat count
invalid escape sequence                    invalid escape sequence
trailing \\                                 trailing backslash at end of expression
invalid character class                    invalid character class
invalid character class range              invalid character class range
invalid perl operator                      invalid or unsupported Perl syntax
invalid named capture group                invalid named capture
invalid UTF-8                              invalid UTF-8  [2]
unexpected error                           regexp/syntax: internal error
pattern too large - compile failed         expression too large  [3]
pattern too large - reverse compile failed expression too large  [3]
=========================================  ==================================================

[1] RE2/J has no "unexpected )" error: an unbalanced ``)`` underflows its parse stack in
    ``parseRightParen`` and it throws ``ERR_INTERNAL_ERROR`` ("regexp/syntax: internal
    error"), which is therefore what Kafka answers for ``a)``.
[2] Only reachable for a ``str`` holding lone surrogates; Java has no equivalent error.
[3] RE2/J has no program-size limit and would accept such a pattern (e.g. ``\\pL{1000}``
    repeated); we keep RE2's memory bound for client-supplied input and use Go's wording
    (``ErrLarge``). Likewise RE2 rejects nested repetition whose product exceeds 1000
    (``(?:a{1000}){2}``: "invalid repeat count") where RE2/J would build the huge program.

An unknown RE2 code text (a future RE2 release) is passed through unchanged.

Two constructs RE2 (C++) accepts but RE2/J rejects are checked after RE2 accepted the
pattern, so Kafka's answer is reproduced: ``\\C`` (any byte; RE2/J: "invalid escape
sequence") and capture-group names that repeat (RE2/J: "duplicate capture group name") or are
not ``[A-Za-z0-9_]+`` (RE2/J: "invalid named capture"). For a pattern RE2 rejects we report
RE2's first error, which is RE2/J's first error except in contrived patterns that also
contain one of those constructs earlier on.

**Length limit.** Kafka has none; patterns come from clients, so we reject those longer than
:data:`MAX_REGEX_LENGTH` characters before compiling (message in :func:`validate_regex`,
with the pattern echoed only up to :data:`_ECHO_CHARS` characters).

**Caching.** :func:`compile_regex` is an ``lru_cache`` of :data:`COMPILE_CACHE_SIZE` compiled
patterns: a group's regexes are re-resolved every time topics are created and at least
every ``group.consumer.regex.refresh.interval.ms``, and the same pattern is usually shared
by all members of a group (and often by many groups). Compiling takes microseconds, so the
bound is about memory: worst case ``COMPILE_CACHE_SIZE * max_mem``, in practice a few KiB
per simple pattern. Invalid patterns raise and are therefore not cached.

**Invalid patterns during resolution.** Kafka validates a regex when a member first brings
it; if resolution ever meets an invalid one it logs and ignores it, leaving it matching
nothing. :func:`resolve_regex` and :func:`resolve_all` do the same (return an empty tuple),
without logging: this module is pure (no I/O, no clock, no asyncio).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import re2

__all__ = [
    "COMPILE_CACHE_SIZE",
    "MAX_REGEX_LENGTH",
    "RE2_TO_RE2J_ERRORS",
    "CompiledRegex",
    "InvalidRegexError",
    "compile_regex",
    "invalid_regex_message",
    "resolve_all",
    "resolve_regex",
    "validate_regex",
]

# Longest SubscribedTopicRegex we compile, in characters. Kafka has no limit; RE2 already
# bounds time (linear) and memory (max_mem), so this is a sanity cap on request-supplied input
# and on the cache's keys (1024 x 16 KiB). It is generous on purpose: an alternation of a few
# hundred explicit topic names ("orders-1|orders-2|...") is a real-world pattern and compiles
# in well under a millisecond.
MAX_REGEX_LENGTH = 16_384

# How many compiled patterns compile_regex keeps (LRU).
COMPILE_CACHE_SIZE = 1024

# How much of an over-long pattern is echoed in the error message.
_ECHO_CHARS = 64

# RE2 (C++, re2/regexp.cc kErrorStrings and re2/re2.cc) error code text -> RE2/J
# (com.google.re2j.Parser ERR_* constants) description. See the module docstring.
RE2_TO_RE2J_ERRORS: dict[str, str] = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "unexpected )": "regexp/syntax: internal error",
    "no argument for repetition operator": "missing argument to repetition operator",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "invalid escape sequence": "invalid escape sequence",
    "trailing \\": "trailing backslash at end of expression",
    "invalid character class": "invalid character class",
    "invalid character class range": "invalid character class range",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "invalid UTF-8": "invalid UTF-8",
    "unexpected error": "regexp/syntax: internal error",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}

# RE2/J descriptions for the RE2/J-only checks.
_ERR_INVALID_ESCAPE = "invalid escape sequence"
_ERR_INVALID_NAMED_CAPTURE = "invalid named capture"
_ERR_DUPLICATE_NAMED_CAPTURE = "duplicate capture group name"

# POSIX classes both engines know, as written inside a bracket expression.
_POSIX_CLASSES = frozenset(
    f"[:{neg}{name}:]"
    for neg in ("", "^")
    for name in (
        "alnum",
        "alpha",
        "ascii",
        "blank",
        "cntrl",
        "digit",
        "graph",
        "lower",
        "print",
        "punct",
        "space",
        "upper",
        "word",
        "xdigit",
    )
)

_CAPTURE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _options() -> Any:
    options = re2.Options()
    # Invalid patterns come from clients: report them to the caller, not to stderr.
    options.log_errors = False
    # Everything else at RE2's defaults, which are RE2/J's Pattern.compile(regex) flags
    # (Perl syntax, case-sensitive, '.' excludes '\n', '^'/'$' at text boundaries, UTF-8),
    # and max_mem at RE2's default 8 MiB.
    return options


_OPTIONS = _options()


class InvalidRegexError(ValueError):
    """A pattern RE2/J (and therefore Kafka) would reject; ``message`` is Kafka's text."""

    def __init__(self, pattern: str, message: str) -> None:
        super().__init__(message)
        self.pattern = pattern
        self.message = message


@dataclass(frozen=True, slots=True, eq=False)
class CompiledRegex:
    """A validated, compiled subscription pattern with Kafka's full-match semantics."""

    pattern: str
    _regexp: Any  # re2._Regexp (google-re2 ships no type information)

    def matches(self, topic: str) -> bool:
        """Whether the whole of ``topic`` matches (Java ``Matcher.matches()``)."""
        return self._regexp.fullmatch(_encode_topic(topic)) is not None

    def _matches_encoded(self, topic: bytes) -> bool:
        return self._regexp.fullmatch(topic) is not None


def invalid_regex_message(pattern: str, reason: str) -> str:
    """Kafka's INVALID_REGULAR_EXPRESSION error message for ``pattern``."""
    return f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}."


@functools.lru_cache(maxsize=COMPILE_CACHE_SIZE)
def compile_regex(pattern: str) -> CompiledRegex:
    """Compile ``pattern`` with RE2; raises :class:`InvalidRegexError` with Kafka's message.

    Cached (LRU, :data:`COMPILE_CACHE_SIZE` entries); exceptions are not cached.
    """
    if len(pattern) > MAX_REGEX_LENGTH:
        echo = pattern[:_ECHO_CHARS] + "..."
        raise InvalidRegexError(
            pattern,
            invalid_regex_message(
                echo,
                f"its length {len(pattern)} exceeds the limit of {MAX_REGEX_LENGTH} characters",
            ),
        )
    try:
        encoded = pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRegexError(pattern, invalid_regex_message(pattern, "invalid UTF-8")) from None
    try:
        # Compile the UTF-8 bytes: the binding would encode a str itself, and a bytes pattern
        # lets us match pre-encoded topic names without per-call re-encoding.
        regexp = re2.compile(encoded, _OPTIONS)
    except re2.error as exc:
        reason = _re2j_description(exc)
        raise InvalidRegexError(pattern, invalid_regex_message(pattern, reason)) from None
    reason_or_none = _re2j_only_error(pattern)
    if reason_or_none is not None:
        raise InvalidRegexError(pattern, invalid_regex_message(pattern, reason_or_none))
    return CompiledRegex(pattern, regexp)


def validate_regex(pattern: str) -> str | None:
    """None if ``pattern`` is a valid subscription regex, else Kafka's error message."""
    try:
        compile_regex(pattern)
    except InvalidRegexError as exc:
        return exc.message
    return None


def resolve_regex(pattern: str, topic_names: Iterable[str]) -> tuple[str, ...]:
    """The sorted, distinct topic names ``pattern`` fully matches (none if it is invalid)."""
    try:
        compiled = compile_regex(pattern)
    except InvalidRegexError:
        return ()
    return tuple(
        sorted({name for name in topic_names if compiled._matches_encoded(_encode_topic(name))})
    )


def resolve_all(patterns: Iterable[str], topic_names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Resolve every pattern against one topic list: ``{pattern: sorted matching topics}``.

    Each pattern is compiled once (cached) and the topic names are encoded once. Every given
    pattern is a key; an invalid one maps to ``()`` (Kafka logs and ignores it).
    """
    topics = [(name, _encode_topic(name)) for name in sorted(set(topic_names))]
    result: dict[str, tuple[str, ...]] = {}
    for pattern in patterns:
        if pattern in result:
            continue
        try:
            compiled = compile_regex(pattern)
        except InvalidRegexError:
            result[pattern] = ()
            continue
        result[pattern] = tuple(name for name, raw in topics if compiled._matches_encoded(raw))
    return result


def _encode_topic(name: str) -> bytes:
    # surrogatepass: a str that is not valid Unicode text yields bytes that are not valid
    # UTF-8, which RE2 simply fails to match, instead of raising in the middle of a scan.
    return name.encode("utf-8", "surrogatepass")


def _re2j_description(exc: Exception) -> str:
    """RE2/J's getDescription() for an RE2 compile error."""
    raw = exc.args[0] if exc.args else ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    # RE2 formats "<code text>: <offending fragment>"; no code text contains ": ".
    code_text = text.split(": ", 1)[0]
    return RE2_TO_RE2J_ERRORS.get(code_text, code_text)


def _re2j_only_error(pattern: str) -> str | None:
    """The first error RE2/J reports for a pattern RE2 (C++) accepted, if any.

    Scans left to right as RE2/J's parser does, skipping ``\\Q...\\E`` quoting, escapes and
    bracket expressions; relies on RE2 having accepted the pattern (balanced, well formed).
    """
    names: set[str] = set()
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1] if i + 1 < n else ""
            if nxt == "Q":
                end = pattern.find("\\E", i + 2)
                if end < 0:
                    return None  # the rest of the pattern is literal
                i = end + 2
                continue
            if nxt == "C":
                return _ERR_INVALID_ESCAPE
            i += 2
            continue
        if c == "[":
            i = _skip_bracket(pattern, i)
            continue
        if c == "(" and (pattern.startswith("(?P<", i) or pattern.startswith("(?<", i)):
            begin = i + (4 if pattern[i + 2] == "P" else 3)
            end = pattern.find(">", begin)
            if end < 0:
                return _ERR_INVALID_NAMED_CAPTURE
            name = pattern[begin:end]
            if not name or not _CAPTURE_NAME_CHARS.issuperset(name):
                return _ERR_INVALID_NAMED_CAPTURE
            if name in names:
                return _ERR_DUPLICATE_NAMED_CAPTURE
            names.add(name)
            i = end + 1
            continue
        i += 1
    return None


def _skip_bracket(pattern: str, start: int) -> int:
    """Index just past the bracket expression opening at ``pattern[start] == '['``."""
    i, n = start + 1, len(pattern)
    if i < n and pattern[i] == "^":
        i += 1
    first = True  # a ']' right after '[' or '[^' is a literal
    while i < n:
        c = pattern[i]
        if c == "]" and not first:
            return i + 1
        first = False
        if c == "\\":
            i += 2
            continue
        if pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            if end >= 0 and pattern[i : end + 2] in _POSIX_CLASSES:
                i = end + 2
                continue
        i += 1
    return n
