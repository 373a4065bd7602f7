"""How a token reads, in every label and printout (views, lab.to_str_tokens, a feature's logit effects): its text
as decoded, except a piece of a character that several tokens make (an emoji is four byte tokens in GPT-2's
vocabulary, each decoding alone to U+FFFD): that piece reads as the text its run makes and its own bytes,
'😀 <F0 9F>', and a piece no run completes (a lone byte token) as its bytes, '<C0>'.
"""

from __future__ import annotations

import re
from functools import cache

REPLACEMENT = "\ufffd"  # what decoding a piece of a character gives: "?" in a label, the same for every piece
MAX_RUN = 8  # tokens one character may span (an emoji is four byte tokens in GPT-2's vocabulary)


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (each byte drawn as a printable character in the vocabulary), char -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_bytes(tokenizer, i: int) -> bytes | None:
    """The exact bytes of token `i` where the vocabulary says them: a byte-level BPE piece (GPT-2's 'ð'), or a byte
    fallback token ('<0xF0>', Llama's); None otherwise."""
    piece = tokenizer.convert_ids_to_tokens(int(i))
    if not isinstance(piece, str) or not piece:
        return None
    if m := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece):
        return bytes([int(m[1], 16)])
    table = _byte_decoder()
    return bytes(table[c] for c in piece) if all(c in table for c in piece) else None


def _hex(tokenizer, i: int, k: int, n: int) -> str:
    raw = token_bytes(tokenizer, i)
    return f"<{' '.join(f'{b:02X}' for b in raw)}>" if raw is not None else f"<part {k + 1} of {n}>"


def token_texts(tokenizer, ids) -> list[str]:
    """Each token's text as views label it: decoded alone, except a piece of a character that several tokens make
    (an emoji is four byte tokens in GPT-2's vocabulary, each decoding alone to U+FFFD): each piece then reads as the
    text its run makes and its own bytes, '😀 <F0 9F>' (so four pieces are four labels, none a bare "?"); a piece
    no run completes (a lone byte token, as a top prediction) reads as its bytes, '<F0>'."""
    ids = [int(i) for i in ids]
    texts = [tokenizer.decode([i]) for i in ids]
    i = 0
    while i < len(ids):
        if REPLACEMENT not in texts[i]:
            i += 1
            continue
        # the shortest run from here that decodes whole (no replacement character left)
        end = next((j for j in range(i + 2, min(len(ids), i + MAX_RUN) + 1)
                    if REPLACEMENT not in tokenizer.decode(ids[i:j])), None)
        if end is None:
            texts[i] = _hex(tokenizer, ids[i], 0, 1)
            i += 1
            continue
        whole = tokenizer.decode(ids[i:end])
        for k in range(i, end):
            texts[k] = f"{whole} {_hex(tokenizer, ids[k], k - i, end - i)}"
        i = end
    return texts


def token_text(tokenizer, i: int) -> str:
    """One token's text as views label it (token_texts of one id): a lone byte piece as its bytes."""
    return token_texts(tokenizer, [i])[0]
