"""Byte-level BPE pieces (GPT-2's byte tokens: an emoji is four) labelled as the characters they make, never as
U+FFFD: each piece reads as its run's text and its own bytes ('😀 <F0>'), a lone piece (a top prediction) as its
bytes; checked against the text's own UTF-8, and as tick labels in Chromium."""

from __future__ import annotations

import re

import pytest

import interplab as ilab
from interplab.tokens import token_text
from interplab.views.attention import attention_widget
from interplab.views.lens import lens_widget
from interplab.views.logits import prompt_tokens

pytestmark = pytest.mark.browser

PROMPT = "When Mary and John went to the store 😀, é John gave a drink to"


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


def test_byte_pieces_read_as_the_characters_they_make_with_their_exact_bytes(lab):
    raw = [lab.tokenizer.decode([i]) for i in lab.tokenizer(PROMPT)["input_ids"]]  # the decoder's, one by one
    labels = prompt_tokens(lab, PROMPT)
    assert lab.to_str_tokens(PROMPT) == labels  # the Lab prints tokens as every view labels them
    assert len(labels) == len(raw) and sum("\ufffd" in t for t in raw) >= 6  # the emoji's 4 pieces, é's 2
    assert not any("\ufffd" in t for t in labels), labels
    for char in ("😀", "é"):  # each piece: the character, then its own bytes; together, the character's UTF-8
        pieces = [t for t in labels if t.startswith(f"{char} <")]
        hex_bytes = bytes.fromhex("".join(re.fullmatch(rf"{char} <([0-9A-F ]+)>", t)[1] for t in pieces))
        assert hex_bytes == char.encode("utf-8"), (char, pieces)
    # everything else as decoded before
    assert [t for t in labels if " <" not in t] == [t for t in raw if "\ufffd" not in t]
    # a lone byte piece (a top prediction) reads as its bytes
    first = lab.tokenizer("😀", add_special_tokens=False)["input_ids"][0]
    assert token_text(lab.tokenizer, first) == "<F0>"


@pytest.mark.parametrize("kind", ["attention", "lens"])
def test_emoji_tick_labels_in_chromium(page, mount, lab, kind):
    widget = attention_widget(lab, PROMPT) if kind == "attention" else lens_widget(lab, PROMPT)
    state = {k: v for k, v in widget.get_state().items() if k not in ("_esm", "_bundle", "layout")}
    w = mount(kind, **state)
    w.wait_paints(1)
    ticks = w.js("(w) => [...w.el.querySelectorAll('.xtick text')].map((t) => t.textContent)")
    assert [t for t in ticks if t.startswith("😀")] == ["😀 <F0>", "😀 <9F>", "😀 <98>", "😀 <80>"], ticks
    assert not any("\ufffd" in t or t.strip("␣ ") == "?" for t in ticks), ticks
