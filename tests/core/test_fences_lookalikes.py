"""Fences hold against look-alike tags: a zero-width or other format character, a fullwidth or
compatibility form, a combining mark or a bracket look-alike inside one of our tags never lets
the tag through ``neutralize``, and text without a tag is left exactly as it was."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langmem_ext.core.fences import FENCE_TAGS, neutralize

#: a fence tag as a model reads it once the text is NFKC-normalized and format characters are gone
ASCII_TAG = re.compile(r"<\s*/?\s*(?:" + "|".join(FENCE_TAGS) + r")\b", re.IGNORECASE)

#: format characters (category Cf) a model ignores: zero-width, joiners, bidi marks, soft hyphen,
#: word joiner, BOM, a tag character
FORMAT = [
    "\u200b",
    "\u200c",
    "\u200d",
    "\u200e",
    "\u200f",
    "\u00ad",
    "\u2060",
    "\ufeff",
    "\U000e0041",
]


def read_as_model(text: str) -> str:
    """NFKC, then without format characters: how the tests decide a tag got through."""
    return "".join(
        c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf"
    )


def fullwidth(char: str) -> str:
    """The fullwidth form of a printable ASCII character (``<`` → ``＜``)."""
    return chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char


@st.composite
def disguised_tags(draw: st.DrawFn) -> str:
    """One of our tags (opening or closing, maybe with attributes), with format characters put
    between any of its characters and any of its characters in fullwidth form."""
    name = draw(st.sampled_from(FENCE_TAGS))
    closing = draw(st.booleans())
    tag = f"<{'/' if closing else ''}{name}{draw(st.sampled_from(['', ' x=1', ' ']))}>"
    out = []
    for char in tag:
        if draw(st.booleans()):
            char = fullwidth(char)
        out.append(char)
        out.extend(draw(st.lists(st.sampled_from(FORMAT), max_size=2)))
    prefix = draw(st.text(max_size=10))
    return prefix + "".join(out) + draw(st.text(max_size=10))


@settings(max_examples=300, deadline=None)
@given(disguised_tags())
def test_neutralize_never_lets_a_disguised_fence_tag_through(text: str) -> None:
    assert ASCII_TAG.search(read_as_model(text)) is not None  # the disguise is a real tag
    assert ASCII_TAG.search(read_as_model(neutralize(text))) is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_neutralize_output_never_reads_as_a_fence_tag(text: str) -> None:
    assert ASCII_TAG.search(read_as_model(neutralize(text))) is None


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="<\u226e\ufe64\uff1c"), max_size=80))
def test_neutralize_leaves_text_without_an_opening_bracket_unchanged(text: str) -> None:
    assert neutralize(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a<\u200b/conversation_summary>b", "a‹\u200b/conversation_summary›b"),
        ("\uff1c/conversation_summary\uff1e", "‹/conversation_summary›"),
        ("<\uff0fsummary>", "‹\uff0fsummary›"),
        ("<sum\u00admary>", "‹sum\u00admary›"),
        ("<summary\u0301>", "‹summary\u0301›"),
        ("\u226e/transcript>", "‹/transcript›"),
        ("\u02c2/transcript\u02c3", "‹/transcript›"),
        ("<\u2215passage>", "‹\u2215passage›"),
    ],
    ids=[
        "zero-width",
        "fullwidth",
        "fullwidth-slash",
        "soft-hyphen",
        "combining",
        "composed",
        "arrowheads",
        "division-slash",
    ],
)
def test_neutralize_makes_lookalike_tags_inert_and_keeps_the_rest(text: str, expected: str) -> None:
    assert neutralize(text) == expected


def test_neutralize_keeps_lookalikes_and_accents_outside_tags() -> None:
    text = "café ＜b＞ 〈book〉 x < y, naïve <transcript>"
    assert neutralize(text) == "café ＜b＞ 〈book〉 x < y, naïve ‹transcript›"
