"""Word tokens of texts as integer ids, from their UTF-8 bytes, vectorized: the one tokenizer
of the consistency gate (:func:`fastuq.decisions.consistency_scores`) and of the lexical
similarity of a round's texts (:mod:`fastuq.signals.lexical`).

A token is a run of ``re``'s ``\\w`` characters of the lowercased text (``[A-Za-z0-9_]`` on
ASCII, found from the bytes; a text with a non-ASCII character is first replaced by its
``re`` words of its Python lowercasing, all such texts in one ``str.lower`` and one
``re.sub``). A token of at most 8 bytes
is its own id (its bytes, little-endian: exact); a longer one gets a 61-bit hash of its
bytes (two different long tokens share an id with probability about ``2**-61``).
:func:`word_token_ids` works on raw bytes and offsets; :func:`text_token_ids` on an Arrow
string array.
"""

from __future__ import annotations

import numpy as np

__all__ = ["WORD", "fmix64", "text_token_ids", "word_token_ids"]

#: The tokens of a text with a non-ASCII character: Python's ``re`` words of its lowercasing.
WORD = r"\w+"

_LOW_BYTES = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], np.uint64)
_U64 = np.dtype("<u8")
_ONES = np.uint64(0x0101010101010101)
_HIGHS = np.uint64(0x8080808080808080)
_WORD_KEY = 0x9E3779B97F4A7C15  # word j of a long token is mixed with j * _WORD_KEY


def word_token_ids(data: np.ndarray, off: np.ndarray,
                   tag: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Token keys of text rows: the word tokens of the consistency gate and of
    ``lexical_similarity``, one shared definition.

    Args:
      data: ``[B]`` uint8, the rows' UTF-8 bytes back to back.
      off: ``[R+1]`` int64, row ``r`` is ``data[off[r]:off[r+1]]`` (``off[0] == 0``).
      tag: 0 or 1, the key's lowest bit.

    Returns:
      ``(keys [T] uint64, first [R+1] int64)``: row ``r``'s tokens, in text order, are
      ``keys[first[r]:first[r+1]]``; a key is ``id << 1 | tag`` with ``id < 2**63 - 1``.
    """
    if data.size and data.max() >= 0x80:
        data, off = _words_of_non_ascii(data, off)
    nb = data.size
    low = np.zeros(nb + 16, np.uint8)  # token bytes lowercased, every other byte 0
    lv = low[:nb]
    np.less(data - 0x41, 26, out=lv.view(bool))  # upper-case ASCII: 1, else 0
    lv <<= 5
    lv |= data
    tok = np.less(lv - 0x61, 26)
    tok |= np.less(data - 0x30, 10)
    tok |= data == 0x5F
    tok |= data >= 0x80
    np.multiply(lv, tok, out=lv)
    start = tok.copy()
    start[1:] &= ~tok[:-1]
    rows = np.flatnonzero(off[1:] > off[:-1])
    start[off[rows]] = tok[off[rows]]  # a token never spans two rows
    si = np.flatnonzero(start)
    first = np.searchsorted(si, off)
    # the 8 bytes from a position as one uint64 (little-endian: the first byte lowest), read
    # from two aligned words only at the positions asked for (no 8-byte word per byte)
    words = _Words(low)
    ids = words[si]
    # keep the bytes before the first zero byte (the token's end): t flags the lowest zero
    # byte of each word exactly (bit 7 of that byte), or is 0 when all 8 bytes are nonzero
    t = ids - _ONES
    t &= ~ids
    t &= _HIGHS
    full = t == 0
    t &= ~t + np.uint64(1)
    t >>= np.uint64(7)
    t -= np.uint64(1)
    ids &= t
    # a row ending in a token byte, followed by a row starting with one: the word of its last
    # token runs into the next row; cut it at the row's end
    end = off[rows + 1]
    glued = rows[(end < nb) & tok[end - 1] & tok[np.minimum(end, nb - 1)]]
    g_tok = first[glued + 1] - 1
    g_len = off[glued + 1] - si[g_tok]
    full[g_tok] = False
    ids[g_tok] = words[si[g_tok]] & _LOW_BYTES[np.minimum(g_len, 8)]
    # longer than 8 bytes: 8 nonzero bytes and a ninth
    f = np.flatnonzero(full)
    w1 = words[si[f] + 8]
    more = (w1 & np.uint64(0xFF)) != 0
    long, w1 = f[more], w1[more]
    if long.size:  # 9 to 15 bytes: the second word cut at its first zero byte
        t = w1 - _ONES
        t &= ~w1
        t &= _HIGHS
        two = t != 0
        t &= ~t + np.uint64(1)
        t >>= np.uint64(7)
        t -= np.uint64(1)
        w1 &= t
        w1 ^= np.uint64(_WORD_KEY)
        h = fmix64(ids[long]) + fmix64(w1)  # as _long_hash, without the lengths
        longer = np.flatnonzero(~two)  # 16 bytes or more
        if longer.size:
            s = si[long[longer]]
            h[longer] = _long_hash(words, s, _long_lengths(words, s, lv))
        ids[long] = _long_id(h)
    g_long = np.flatnonzero(g_len > 8)
    if g_long.size:
        k = g_tok[g_long]
        ids[k] = _long_id(_long_hash(words, si[k], g_len[g_long]))
    high = np.flatnonzero(ids >> np.uint64(63))  # 8 bytes, the last non-ASCII: hashed,
    if high.size:  # as the shift below would drop that bit
        ids[high] = _long_id(_long_hash(words, si[high], np.full(high.size, 8, np.int64)))
    ids <<= np.uint64(1)
    if tag:
        ids |= np.uint64(1)
    return ids, first


class _Words:
    """The 8 bytes from each asked-for position of a byte buffer as one little-endian uint64
    (``words[pos]``): a gather of 8-byte items from a view of the buffer that starts one
    at every byte (no 8-byte word is made for every byte, only for the positions asked)."""

    def __init__(self, buf: np.ndarray) -> None:
        self.v = np.ndarray((buf.size - 7,), np.dtype("V8"), buf, 0, (1,))

    def __getitem__(self, pos: np.ndarray) -> np.ndarray:
        return self.v[pos].view(_U64)


def _long_lengths(words: np.ndarray, start: np.ndarray, lv: np.ndarray) -> np.ndarray:
    """Lengths of tokens with more than 15 bytes, from their starts: the first zero byte after
    the first 16, found word by word (a token of more than 64 bytes: from the zero bytes'
    positions)."""
    length = np.zeros(start.size, np.int64)
    active = np.arange(start.size)
    for j in range(2, 9):
        if not active.size:
            return length
        w = words[start[active] + 8 * j]
        t = w - _ONES
        t &= ~w
        t &= _HIGHS
        hit = t != 0
        t = t[hit]
        t &= ~t + np.uint64(1)  # 2 ** (8 k + 7) for the first zero byte k
        length[active[hit]] = 8 * j + (np.log2(t.astype(np.float64)).astype(np.int64) >> 3)
        active = active[~hit]
    if active.size:
        zeros = np.r_[np.flatnonzero(lv == 0), lv.size]  # a token ends at one, or at the end
        s = start[active]
        length[active] = zeros[np.searchsorted(zeros, s)] - s
    return length


def _long_hash(words: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Hashes of tokens longer than 8 bytes: ``sum_j fmix64(w_j ^ j * _WORD_KEY)`` over the
    8-byte words ``w_j`` of the token, ``j = 0 .. length // 8``, bytes past its end zeroed
    (so the last word may be 0: a token has no zero byte, and its length is implied)."""
    nw = length // 8 + 1
    tok = np.repeat(np.arange(length.size), nw)
    head = np.cumsum(nw) - nw
    j = np.arange(tok.size) - head[tok]
    w = words[start[tok] + 8 * j] & _LOW_BYTES[np.minimum(length[tok] - 8 * j, 8)]
    w ^= j.astype(np.uint64) * np.uint64(_WORD_KEY)
    return np.add.reduceat(fmix64(w), head)


def _long_id(h: np.ndarray) -> np.ndarray:
    """A hashed token's id from its hash: 62 bits of it with bit 7 set. An ASCII short
    token's id has bit 7 clear (its first byte is ASCII), so the two kinds never collide
    there; a short non-ASCII token (first byte >= 0x80) can equal a hash only by a hash
    collision. Every id stays below ``2**63 - 1`` (bit 63 clear)."""
    h &= np.uint64((1 << 62) - 1)
    h |= np.uint64(0x80)
    return h


def fmix64(k: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser of a uint64 array, in place (and returned): a bijection
    of the 64-bit integers, so distinct inputs give distinct outputs."""
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xFF51AFD7ED558CCD)
    k ^= k >> np.uint64(33)
    k *= np.uint64(0xC4CEB9FE1A85EC53)
    k ^= k >> np.uint64(33)
    return k


def _words_of_non_ascii(data: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""The rows holding a non-ASCII byte replaced by their ``re`` words (``\w+`` of the
    Python-lowercased text) with a space between words; ASCII rows are unchanged (their
    tokens are found from the bytes: ``\w`` on ASCII is ``[A-Za-z0-9_]`` and lowercasing
    ASCII stays ASCII). A word's UTF-8 bytes are all token bytes and a space is none, so the
    byte tokenizer reads those words back exactly.

    All such rows at once, with no Python loop over them: their bytes joined with a NUL
    after each row (a NUL inside a row is first made a space: neither is a word character,
    cased, or case-ignorable, so neither changes the row's words or its lowercasing, final
    sigma included), decoded, lowercased and reduced to words by one ``str.lower`` and one
    ``re.sub`` over the whole string, encoded back and cut at the NULs."""
    import re

    hit = np.flatnonzero(data >= 0x80)
    rows = np.unique(np.searchsorted(off, hit, side="right") - 1)
    length = np.diff(off)
    r_len = length[rows]
    # the rows' bytes, each followed by one NUL
    j_off = np.zeros(rows.size + 1, np.int64)
    np.cumsum(r_len + 1, out=j_off[1:])
    joined = np.zeros(int(j_off[-1]), np.uint8)
    body = np.arange(joined.size) - np.repeat(j_off[:-1], r_len + 1)
    is_body = body < np.repeat(r_len, r_len + 1)
    joined[is_body] = data[np.repeat(off[rows], r_len + 1)[is_body] + body[is_body]]
    joined[is_body & (joined == 0)] = 0x20
    text = joined.tobytes().decode("utf-8", errors="replace").lower()
    out = np.frombuffer(re.sub(r"[^\w\x00]+", " ", text).encode("utf-8"), np.uint8)
    ends = np.flatnonzero(out == 0)  # one per row, in order
    l_off = np.r_[0, ends[:-1] + 1]
    src = off[:-1].copy()
    length[rows] = ends - l_off
    src[rows] = data.size + l_off
    new_off = np.zeros(len(off), np.int64)
    np.cumsum(length, out=new_off[1:])
    pos = np.arange(new_off[-1]) - np.repeat(new_off[:-1] - src, length)
    return np.concatenate([data, out])[pos], new_off


def text_token_ids(texts) -> tuple[np.ndarray, np.ndarray]:
    """``(ids [K] uint64, first [R+1] int64)``: the word-token ids of every row of an Arrow
    string array ``texts`` (``R`` rows; a null row has no token), row ``r``'s in text order
    at ``ids[first[r]:first[r+1]]`` (repeats kept). The ids are :func:`word_token_ids`'
    keys without the tag bit (``id < 2**62``)."""
    import pyarrow as pa

    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    texts = texts.cast(pa.large_string())
    if texts.null_count:
        texts = texts.fill_null("")
    _, off_buf, data_buf = texts.buffers()
    off = np.frombuffer(off_buf, np.int64, count=len(texts) + 1, offset=8 * texts.offset)
    data = (np.frombuffer(data_buf, np.uint8) if data_buf is not None
            else np.zeros(0, np.uint8))
    data = data[off[0]:off[-1]]
    keys, first = word_token_ids(data, off - off[0], tag=0)
    return keys >> np.uint64(1), first
