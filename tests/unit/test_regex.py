"""KIP-848 regex subscriptions: RE2/J-compatible validation messages and full-match resolution."""

from __future__ import annotations

import re
import time

import pytest

from groupcoord.coordinator.groups.consumer.regex import (
    COMPILE_CACHE_SIZE,
    MAX_REGEX_LENGTH,
    RE2_TO_RE2J_ERRORS,
    InvalidRegexError,
    compile_regex,
    invalid_regex_message,
    resolve_all,
    resolve_regex,
    validate_regex,
)


def msg(pattern: str, reason: str) -> str:
    return f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {reason}."


# --- validation -------------------------------------------------------------------------


def test_s10_missing_closing_bracket_exact_kafka_message() -> None:
    # Scenario S10 / GroupMetadataManagerTest#testConsumerHeartbeatRegexValidation.
    assert (
        validate_regex("[")
        == "SubscribedTopicRegex `[` is not a valid regular expression: missing closing ]."
    )


@pytest.mark.parametrize(
    "pattern",
    [
        ".*",
        "foo.*",
        "topic-[0-9]+",
        "foo*",
        "",
        "(?i)orders",
        "a|b|c",
        "[[:alpha:]]+",
        "\\p{Greek}",
        "(?P<name>x)",
        "(?<name>x)(?P<other>y)",
        "\\Q(?P<n>a)(?P<n>b)\\E",  # quoted: not groups
        "[(?P<n>][(?P<n>]",  # inside brackets: not groups
        "\\(?P<n>a\\)",  # escaped '(': not a group
        "x{1000}",
        "a{,5}",  # not a repeat: literal
        "\\10",  # octal, not a backreference
        "^foo$",
        "\\Qa(b",  # unterminated \Q: rest is literal
    ],
)
def test_valid_patterns(pattern: str) -> None:
    assert validate_regex(pattern) is None
    assert compile_regex(pattern).pattern == pattern


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("[", "missing closing ]"),
        ("[a", "missing closing ]"),
        ("[]", "missing closing ]"),
        ("(", "missing closing )"),
        ("(?:a", "missing closing )"),
        ("*", "missing argument to repetition operator"),
        ("+", "missing argument to repetition operator"),
        ("a|*", "missing argument to repetition operator"),
        ("{1}", "missing argument to repetition operator"),
        ("a**", "invalid nested repetition operator"),
        ("a++", "invalid nested repetition operator"),
        ("x{2}{3}", "invalid nested repetition operator"),
        ("x{2,1}", "invalid repeat count"),
        ("x{1001}", "invalid repeat count"),
        ("\\", "trailing backslash at end of expression"),
        ("foo\\", "trailing backslash at end of expression"),
        ("[z-a]", "invalid character class range"),
        ("[[:foo:]]", "invalid character class range"),
        ("\\p{Foo}", "invalid character class range"),
        ("\\q", "invalid escape sequence"),
        ("\\Z", "invalid escape sequence"),
        ("(?z)", "invalid or unsupported Perl syntax"),
        ("(?P<>a)", "invalid named capture"),
        ("(?P<n", "invalid named capture"),
        # RE2/J underflows its stack on an unbalanced ')' and reports an internal error.
        (")", "regexp/syntax: internal error"),
        ("a)", "regexp/syntax: internal error"),
    ],
)
def test_invalid_patterns_use_re2j_wording(pattern: str, reason: str) -> None:
    assert validate_regex(pattern) == msg(pattern, reason)
    with pytest.raises(InvalidRegexError) as info:
        compile_regex(pattern)
    assert info.value.message == msg(pattern, reason)
    assert info.value.pattern == pattern
    assert str(info.value) == msg(pattern, reason)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a)\\1", "invalid escape sequence"),  # backreference
        ("(?=a)", "invalid or unsupported Perl syntax"),  # lookahead
        ("(?!a)", "invalid or unsupported Perl syntax"),  # negative lookahead
        ("(?<=a)b", "invalid or unsupported Perl syntax"),  # lookbehind
        ("(?P<n>a)(?P=n)", "invalid or unsupported Perl syntax"),  # named backreference
        ("(?#comment)", "invalid or unsupported Perl syntax"),
        ("a*+", "invalid nested repetition operator"),  # possessive quantifier
        ("foo\\Z", "invalid escape sequence"),  # Python's end-of-text spelling
    ],
)
def test_python_re_features_rejected_like_re2j(pattern: str, reason: str) -> None:
    re.compile(pattern)  # Python's backtracking engine accepts all of these ...
    assert validate_regex(pattern) == msg(pattern, reason)  # ... RE2/J does not


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        # RE2 (C++) accepts these; RE2/J (Kafka) rejects them.
        ("\\C", "invalid escape sequence"),
        ("a\\Cb", "invalid escape sequence"),
        ("(?P<n>a)(?P<n>b)", "duplicate capture group name"),
        ("(?P<n>a)|(?<n>b)", "duplicate capture group name"),
        ("(?P<é>a)", "invalid named capture"),
    ],
)
def test_re2j_only_rejections(pattern: str, reason: str) -> None:
    assert validate_regex(pattern) == msg(pattern, reason)


def test_error_mapping_covers_all_re2_code_texts() -> None:
    # Every RE2 C++ error code text (re2/regexp.cc kErrorStrings, re2/re2.cc) is mapped.
    re2_codes = {
        "unexpected error",
        "invalid escape sequence",
        "invalid character class",
        "invalid character class range",
        "missing ]",
        "missing )",
        "unexpected )",
        "trailing \\",
        "no argument for repetition operator",
        "invalid repetition size",
        "bad repetition operator",
        "invalid perl operator",
        "invalid UTF-8",
        "invalid named capture group",
        "pattern too large - compile failed",
        "pattern too large - reverse compile failed",
    }
    assert set(RE2_TO_RE2J_ERRORS) == re2_codes


def test_program_too_large_is_reported_not_raised() -> None:
    pattern = "\\pL{1000}" * 10  # RE2's 8 MiB program budget
    assert validate_regex(pattern) == msg(pattern, "expression too large")


def test_lone_surrogate_pattern() -> None:
    assert validate_regex("\ud800") == msg("\ud800", "invalid UTF-8")


def test_length_limit() -> None:
    at_limit = "a" * MAX_REGEX_LENGTH
    assert validate_regex(at_limit) is None
    too_long = "a" * (MAX_REGEX_LENGTH + 1)
    message = validate_regex(too_long)
    assert message is not None
    assert message.startswith("SubscribedTopicRegex `aaaa")
    assert "is not a valid regular expression" in message
    assert f"exceeds the limit of {MAX_REGEX_LENGTH} characters" in message
    assert str(MAX_REGEX_LENGTH + 1) in message
    assert len(message) < 300  # the pattern is not echoed in full
    assert resolve_regex(too_long, ["a"]) == ()


def test_invalid_regex_message_format() -> None:
    assert invalid_regex_message("x", "why") == msg("x", "why")


# --- compilation cache ------------------------------------------------------------------


def test_compile_is_cached() -> None:
    first = compile_regex("cached-.*")
    assert compile_regex("cached-.*") is first
    info = compile_regex.cache_info()
    assert info.maxsize == COMPILE_CACHE_SIZE
    assert info.hits >= 1


# --- full-match semantics ---------------------------------------------------------------


def test_full_match_semantics() -> None:
    assert not compile_regex("foo").matches("foobar")
    assert not compile_regex("foo").matches("xfoo")
    assert compile_regex("foo").matches("foo")
    assert compile_regex("foo.*").matches("foo")
    assert compile_regex("foo.*").matches("foobar")
    assert not compile_regex("foo.*").matches("barfoo")
    # Full match is found even when the leftmost alternative matches a prefix only.
    assert compile_regex("foo|foobar").matches("foobar")
    # "foo*" is f, o, o* -- not a glob.
    assert compile_regex("foo*").matches("fo")
    assert not compile_regex("foo*").matches("foobar")
    # '.' does not match '\n' (RE2/J default flags).
    assert not compile_regex("a.b").matches("a\nb")


def test_resolve_regex_sorted_distinct_full_matches() -> None:
    topics = ["foobar", "bar", "foo", "__consumer_offsets", "food", "foo"]
    assert resolve_regex("foo.*", topics) == ("foo", "foobar", "food")
    assert resolve_regex("foo", topics) == ("foo",)
    assert resolve_regex("topic-[0-9]+", ["topic-10", "topic-2", "topic-x", "topic-1"]) == (
        "topic-1",
        "topic-10",
        "topic-2",
    )
    assert resolve_regex("nothing", topics) == ()
    assert resolve_regex("foo.*", iter(topics)) == ("foo", "foobar", "food")


def test_internal_topics_are_not_filtered() -> None:
    topics = ["__consumer_offsets", "__transaction_state", "orders"]
    assert resolve_regex(".*", topics) == ("__consumer_offsets", "__transaction_state", "orders")
    assert resolve_regex("__.*", topics) == ("__consumer_offsets", "__transaction_state")


def test_invalid_regex_resolves_to_nothing() -> None:
    assert resolve_regex("[", ["[", "a"]) == ()


def test_resolve_all() -> None:
    topics = ["foo", "foobar", "bar", "baz", "__consumer_offsets"]
    result = resolve_all(["foo.*", "ba.", "[", "foo.*", "none"], iter(topics))
    assert result == {
        "foo.*": ("foo", "foobar"),
        "ba.": ("bar", "baz"),
        "[": (),
        "none": (),
    }
    assert resolve_all([], topics) == {}
    assert resolve_all(["x"], []) == {"x": ()}


def test_non_ascii_topic_and_pattern() -> None:
    # Matching is on code points (UTF-8 under the hood), not bytes.
    assert resolve_regex("t.", ["té", "t"]) == ("té",)
    assert resolve_regex("é+", ["éé", "e"]) == ("éé",)
    # A lone surrogate is one char, as in a Java String: no exception, '.' matches it.
    assert compile_regex(".").matches("\ud800")
    assert not compile_regex("a").matches("\ud800")


def test_linear_time_on_catastrophic_backtracking_pattern() -> None:
    # (a+)+$ backtracks exponentially in Python's re on "aaaa...!"; RE2 is linear.
    topic = "a" * 200 + "!"
    start = time.perf_counter()
    assert resolve_regex("(a+)+b", [topic] * 100) == ()
    assert time.perf_counter() - start < 1.0
