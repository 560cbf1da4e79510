"""The consistency gate's own score (DESIGN.md, "Consistency gate"): the agreement of a
candidate answer with its ``k`` sampled answers, in [0, 1], for whole columns at once
(:func:`consistency_scores`; :func:`corpus_consistency` reads a corpus's ``candidate`` and
``samples``). Higher is more consistent: calibrate its threshold with
:func:`fastuq.decisions.threshold.calibrate_threshold` and ``higher_passes=True``.

Definition. For a candidate text ``c`` and one sample text ``s``, the agreement is

1. 1.0 when the normalised texts are equal (lowercased, runs of whitespace one space,
   stripped);
2. else, when both texts state a final answer (:func:`fastuq.answers.extract_answer`, read
   over the column by :func:`fastuq.answers.extract_answer_column`: last ``\\boxed{}``, "the
   answer is ...", a choice letter, else the last number, with thousands separators,
   fractions, dates and units as that module reads them): 1.0 when the answers are
   equivalent (:func:`fastuq.answers.answers_equivalent`, ``math=False``: equal normalised
   answers, or numbers within a relative ``1e-6``), else 0.0, whatever the rest of the
   texts share;
3. else (either text states no answer): the Jaccard index ``|A n B| / |A u B|`` of the sets of
   Unicode word tokens of the two lowercased texts (``re``'s ``\\w+``: "Москва" is a token,
   so "Москва" and "Ответ: Москва" score 1/2); 0.0 when both sets are empty.

The candidate's score is the **mean** of these agreements over its *usable* samples (non-null
and non-empty after normalisation), clamped to [0, 1]; a candidate without a usable sample
scores 0.0 (the gate fails closed). tests/_references.py (``consistency_exact``) is the same
definition written item by item in plain Python.

The word tokens are :func:`fastuq.signals.tokens.word_token_ids`' (shared with
``lexical_similarity``). Importing this module imports NumPy and :mod:`fastuq.answers`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastuq.answers import check_coded, extract_answer_column
from fastuq.answers.column import string_array
from fastuq.signals.tokens import WORD  # noqa: F401 (re-exported by fastuq.gate)
from fastuq.signals.tokens import word_token_ids as _token_ids

__all__ = ["consistency_scores", "corpus_consistency"]


#: Whitespace as Python has it (``str.isspace``, which ``re``'s ``\s`` and ``str.split``
#: follow): the normalisation collapses runs of these, and a sample of nothing else is empty.
WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
              "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

# Byte classes of UTF-8 text. _SOLID: an ASCII byte that is not whitespace (a row starting or
# ending with one is surely not empty after normalisation).
_SOLID = np.ones(256, bool)
_SOLID[[ord(c) for c in WHITESPACE if ord(c) < 128]] = False
_SOLID[128:] = False
_ASCII_LOWER = np.arange(256, dtype=np.uint8)
_ASCII_LOWER[0x41:0x5B] |= 0x20
_PAD = np.uint64((1 << 64) - 1)  # fills the rows of a pair matrix; no key is PAD or PAD - 1
_ONES = np.uint64(0x0101010101010101)
# Bytes of text per task of the token and pair computation: 256 KB was the fastest of 128 KB
# to 4 MB on the 2-core bench machine (a task's arrays take some 30 times its text).
_CHUNK_BYTES = 1 << 18


def consistency_scores(candidates: Any, samples: Any) -> np.ndarray:
    r"""``[N]`` gate score in [0, 1] of each candidate against its samples (higher = more
    consistent; pass iff ``score >= threshold``, so calibrate with ``higher_passes=True``).

    The score (module docstring, DESIGN.md "Consistency gate") is the mean over the usable
    samples of the pairwise agreement: 1.0 for equal normalised texts; else, when both texts
    state a final answer, 1.0 if the answers are equivalent and 0.0 if not; else the Jaccard
    index of the Unicode word-token sets. No usable sample: 0.0. Whitespace and lowercasing
    are Python's (``str.isspace``, ``str.lower``) up to the Unicode versions of Python and of
    Polars' Rust (the normalised-text comparison lowercases with Polars).

    Vectorized over whole columns, no per-item Python loop on ASCII texts:

    * final answers by :func:`fastuq.answers.extract_answer_column` (Polars searches decide
      most texts; the others cost one ``extract_answer`` call per distinct text), for the
      candidates and for the usable samples of candidates that state one; pairs of answers
      compared by :func:`fastuq.answers.check_coded` (Python once per distinct answer);
    * tokens only for the samples that need a Jaccard index (usable, no answer on one side):
      the UTF-8 bytes of those texts, back to back, classified in NumPy (a token byte is an
      ASCII letter, digit or ``_``, or any byte of a non-ASCII character). A text with a
      non-ASCII character is first replaced by its ``re`` words (``\w+`` of its Python
      lowercasing) joined by spaces, once per distinct text of a chunk: the only per-text
      Python of the tokens. A token of at most 8 bytes is its own id (its bytes,
      little-endian: exact), a longer one (or one of 8 bytes ending in a non-ASCII byte)
      gets a 61-bit hash of its bytes;
    * per (candidate, sample) pair, the sample's token ids (tagged 1) and the candidate's
      (tagged 0) in one row of a padded matrix, sorted along the row: equal tokens are then
      adjacent, so ``|A u B|`` and ``|A n B|`` come from comparing neighbours. Samples run
      in tasks of about ``_CHUNK_BYTES`` of text on a thread pool (NumPy releases the GIL),
      each taken, tokenised and compared while in cache.

    Exact except for a hash collision between two different hashed tokens, or a hashed and a
    short non-ASCII token, within one pair: treating the hash as random, with ``t`` such
    tokens in a pair the probability is below ``t**2 / 2**62``. Texts equal after
    normalisation are compared as normalised strings (Polars) where the answers or the
    token sets do not already decide.

    Args:
      candidates: ``[N]`` strings (a list, NumPy, Arrow or Polars array; null = empty).
      samples: ``[N]`` lists of strings, ``k`` per item (ragged; a null list has no sample,
        a null sample is unusable).

    Returns:
      ``[N]`` float64 scores.

    Raises:
      ValueError: candidates not strings, samples not lists of strings, or the two of
        different lengths.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    cand = string_array(candidates, "candidates")
    texts, item, n_lists = _sample_lists(samples)
    n = len(cand)
    if n_lists != n:
        raise ValueError(f"samples has {n_lists} items for {n} candidates")
    if n == 0:
        return np.zeros(0)
    if cand.null_count:
        cand = pc.fill_null(cand, "")

    usable = _usable(texts)  # [M]
    agree = np.zeros(len(texts))
    decided = np.zeros(len(texts), bool)
    c_ans = extract_answer_column(cand)  # [N], null: no answer
    c_has = c_ans.is_valid().to_numpy(zero_copy_only=False)
    ask = np.flatnonzero(usable & c_has[item])  # samples whose answer can decide
    if ask.size:
        if ask.size > 0.75 * len(texts):  # read them all rather than copy most of them
            s_ans = extract_answer_column(texts).take(pa.array(ask))
        else:
            s_ans = extract_answer_column(texts.take(pa.array(ask)))
        s_has = s_ans.is_valid().to_numpy(zero_copy_only=False)
        both = ask[s_has]
        if both.size:
            same = _same_answers(c_ans, s_ans.filter(pa.array(s_has)), item[both])
            agree[both[same]] = 1.0
            decided[both] = True
            differ = both[~same]
            differ = differ[_may_normalise_alike(cand, item[differ], texts, differ)]
            if differ.size:  # 1.0 all the same for equal normalised texts
                agree[differ] = _same_normalised(cand.take(pa.array(item[differ])),
                                                 texts.take(pa.array(differ)))
    need = np.flatnonzero(usable & ~decided)  # samples that need a Jaccard index
    if need.size:
        agree[need] = _jaccard(cand, texts, item, need)
    kept = np.flatnonzero(usable)
    counts = np.bincount(item[kept], minlength=n)
    sums = np.bincount(item[kept], weights=agree[kept], minlength=n)  # in sample order
    mean = np.divide(sums, counts, out=np.zeros(n), where=counts > 0)
    return np.clip(mean, 0.0, 1.0)


def _same_answers(c_ans, s_ans, c_row: np.ndarray) -> np.ndarray:
    """``[len(s_ans)]`` bool: is sample answer ``s_ans[i]`` equivalent to the candidate answer
    ``c_ans[c_row[i]]`` (both non-null), by :func:`fastuq.answers.check_coded` on one
    dictionary of the distinct answers (Python runs once per distinct answer)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(pa.concat_arrays([c_ans.cast(pa.large_string()),
                                                 s_ans.cast(pa.large_string())]))
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    distinct = enc.dictionary.to_pylist()
    n = len(c_ans)
    return check_coded(distinct, distinct, codes[:n][c_row], codes[n:])


def _sample_lists(samples: Any):
    """``(texts [M] large_string, item [M] int64, N)``: the samples back to back, the item
    each belongs to, and the number of lists; ValueError unless lists of strings."""
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = pa.large_list(pa.large_string())
    if isinstance(samples, pl.Series):
        samples = samples.to_arrow()
    if isinstance(samples, pa.ChunkedArray):
        samples = samples.combine_chunks()
    if isinstance(samples, pa.Array):
        t = samples.type
        if not ((pa.types.is_list(t) or pa.types.is_large_list(t)
                 or pa.types.is_list_view(t) or pa.types.is_large_list_view(t))
                and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)
                     or pa.types.is_string_view(t.value_type)
                     or pa.types.is_null(t.value_type))):
            raise ValueError(f"samples must be lists of strings, got Arrow type {t}")
        lists = samples  # flattened as it is (a cast of a list_view can come out invalid)
    else:
        if isinstance(samples, (str, bytes)):
            raise ValueError("samples must be a sequence of lists of strings, got one string")
        if isinstance(samples, np.ndarray) and samples.ndim == 2:
            samples = samples.tolist()
        if any(isinstance(s, (str, bytes)) for s in samples):
            raise ValueError("samples must be lists of strings (one list per candidate), "
                             "got a string where a list belongs")
        try:
            lists = pa.array(samples, kind)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise ValueError(f"samples must be lists of strings (or None): {e}") from None
    texts = pc.list_flatten(lists).cast(pa.large_string())
    item = pc.list_parent_indices(lists).to_numpy().astype(np.int64, copy=False)
    return texts, item, len(lists)


def _buffers(strings) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets [M+1] int64, data [B] uint8)`` of an Arrow large_string array: row ``i`` is
    ``data[offsets[i]:offsets[i+1]]`` (garbage for a null row)."""
    _, off_buf, data_buf = strings.buffers()
    off = np.frombuffer(off_buf, np.int64, count=len(strings) + 1, offset=8 * strings.offset)
    data = (np.frombuffer(data_buf, np.uint8) if data_buf is not None
            else np.zeros(0, np.uint8))
    return off, data


def _usable(texts) -> np.ndarray:
    """``[M]`` bool: not null and not empty after normalisation (some non-whitespace
    character). Decided from the first and last byte where one is ASCII and not
    whitespace; the rest by a Polars strip."""
    import polars as pl

    off, data = _buffers(texts)
    valid = (np.ones(len(texts), bool) if texts.null_count == 0
             else texts.is_valid().to_numpy(zero_copy_only=False))
    out = valid & (off[1:] > off[:-1])
    rows = np.flatnonzero(out)
    sure = _SOLID[data[off[rows]]] | _SOLID[data[off[rows + 1] - 1]]
    rest = rows[~sure]
    if rest.size:
        stripped = pl.Series(texts.take(rest)).str.strip_chars(WHITESPACE)
        out[rest] = (stripped.str.len_bytes() > 0).to_numpy()
    return out


def _jaccard(cand, texts, item: np.ndarray, need: np.ndarray) -> np.ndarray:
    """``[len(need)]`` agreement of samples ``texts[need]`` with their candidates when the
    numbers do not decide: the Jaccard index of the token sets, or (no token on either side)
    1.0 iff the normalised texts are equal."""
    import pyarrow as pa

    its = item[need]  # sorted: samples are in item order
    first = np.r_[True, its[1:] != its[:-1]]
    c_rows = its[first]  # the candidates involved, and each sample's among them
    c_of = np.cumsum(first) - 1
    kc, fc = _tokenize(cand, c_rows)
    inter, union = _pair_counts(texts, need, kc, fc, c_of)
    out = np.divide(inter, union, out=np.zeros(need.size), where=union > 0)
    empty = np.flatnonzero(union == 0)
    if empty.size:  # neither side has a token: only equal normalised texts agree
        out[empty] = _same_normalised(cand.take(pa.array(its[empty])),
                                      texts.take(pa.array(need[empty])))
    return out


def _may_normalise_alike(a, a_rows: np.ndarray, b, b_rows: np.ndarray) -> np.ndarray:
    """``[len(a_rows)]`` bool, False where the normalised texts ``a[a_rows[i]]`` and
    ``b[b_rows[i]]`` surely differ: their first bytes (or their last bytes) are both ASCII
    and not whitespace, hence each the first (last) normalised character of its text, and
    differ after ASCII lowercasing. A non-ASCII byte decides nothing (lowercasing can turn a
    non-ASCII character into an ASCII letter: the Kelvin sign). Rows must be non-empty."""
    a_off, a_data = _buffers(a)
    b_off, b_data = _buffers(b)
    differ = np.zeros(a_rows.size, bool)
    for a_at, b_at in ((a_off[a_rows], b_off[b_rows]),
                       (a_off[a_rows + 1] - 1, b_off[b_rows + 1] - 1)):
        x, y = a_data[a_at], b_data[b_at]
        differ |= _SOLID[x] & _SOLID[y] & (_ASCII_LOWER[x] != _ASCII_LOWER[y])
    return ~differ


def _same_normalised(a, b) -> np.ndarray:
    """Elementwise: are the normalised texts equal (Polars lowercasing, Python's
    whitespace)."""
    import polars as pl

    ws = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]+"

    def norm(x):
        return (pl.Series(x).str.to_lowercase().str.replace_all(ws, " ")
                .str.strip_chars(" "))

    return (norm(a) == norm(b)).to_numpy()


def _chunks(lengths: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges ``[a, b)`` of about ``_CHUNK_BYTES`` bytes of text each (one row at least)."""
    if not lengths.size:
        return []
    ends = np.cumsum(lengths)
    cuts = np.searchsorted(ends, np.arange(_CHUNK_BYTES, int(ends[-1]), _CHUNK_BYTES))
    cuts = np.unique(np.concatenate([[0], cuts, [lengths.size]]))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True))


def _run(tasks: list) -> list:
    """Call each of ``tasks`` (no arguments), on a thread pool of ``_threads()`` when there
    are several; their results in order."""
    workers = _threads()
    if workers > 1 and len(tasks) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda f: f(), tasks))
    return [f() for f in tasks]


def _text_rows(texts, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(data, off)`` of ``texts[rows]``: their bytes back to back and offsets from 0."""
    import pyarrow as pa

    off, data = _buffers(texts.take(pa.array(rows)))
    return data[off[0]:off[-1]], off - off[0]


def _row_lengths(texts, rows: np.ndarray) -> np.ndarray:
    off, _ = _buffers(texts)
    return off[rows + 1] - off[rows]


def _tokenize(texts, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keys [T], first [len(rows)+1])`` of ``texts[rows]`` (tag 0), in chunks."""
    def task(a: int, b: int):
        return lambda: _token_ids(*_text_rows(texts, rows[a:b]), tag=0)

    parts = _run([task(a, b) for a, b in _chunks(_row_lengths(texts, rows))])
    keys = np.concatenate([k for k, _ in parts] + [np.zeros(0, np.uint64)])
    first = np.zeros(rows.size + 1, np.int64)
    np.cumsum(np.concatenate([np.diff(f) for _, f in parts] + [np.zeros(0, np.int64)]),
              out=first[1:])
    return keys, first


def _pair_counts(texts, need: np.ndarray, kc: np.ndarray, fc: np.ndarray,
                 c_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(|A n B|, |A u B|)`` per sample ``texts[need[i]]`` and its candidate's keys
    ``kc[fc[c_of[i]]:fc[c_of[i]+1]]``. Runs in chunks of about ``_CHUNK_BYTES`` of sample
    text (taken, tokenised and compared while in cache) on a thread pool."""
    inter = np.zeros(need.size, np.int64)
    union = np.zeros(need.size, np.int64)

    def task(a: int, b: int):
        def run() -> None:
            ks, fs = _token_ids(*_text_rows(texts, need[a:b]), tag=1)
            inter[a:b], union[a:b] = _overlap(ks, fs, kc, fc, c_of[a:b])
        return run

    _run([task(a, b) for a, b in _chunks(_row_lengths(texts, need))])
    return inter, union


def _threads() -> int:
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _overlap(ks: np.ndarray, fs: np.ndarray, kc: np.ndarray, fc: np.ndarray,
             c_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(|A n B|, |A u B|)`` per pair: sample keys ``ks[fs[i]:fs[i+1]]`` (tag 1), candidate
    keys ``kc[fc[c_of[i]]:fc[c_of[i]+1]]`` (tag 0).

    Each pair is one row of a matrix ``[pairs, W]`` padded with ``_PAD`` (sample keys, then
    the candidate's, placed by boolean masks; ``W`` a multiple of 8 covering the longest
    row; rows far longer than the median go to matrices of their own, by powers of 2),
    sorted along the row. Then equal keys (a token repeated on one side) are neighbours, and
    so are the two keys of a token on both sides, differing in the tag bit only:
    ``|A n B|`` = neighbours whose XOR is 1, distinct keys = length - neighbours whose XOR
    is 0 (pads excepted), and ``|A u B|`` = distinct keys - ``|A n B|``."""
    ns = np.diff(fs)
    c0 = fc[c_of]
    nc = fc[c_of + 1] - c0
    n = ns + nc
    r = n.size
    cap = max(64, 16 * -(-int(n.mean()) // 8)) if r else 64
    if not r or n.max() <= cap:
        klass = np.zeros(r, np.int64)
    else:
        klass = np.where(n <= cap, 0, np.ceil(np.log2(np.maximum(n, 1))).astype(np.int64))
    eq = np.empty(r, np.int64)
    inter = np.empty(r, np.int64)
    width = np.empty(r, np.int64)
    for k in np.unique(klass):
        if k == 0 and not klass.any():
            rows, ks_k = np.arange(r), ks
        else:
            rows = np.flatnonzero(klass == k)
            ks_k = ks[np.repeat(klass == k, ns)]
        ns_k, nc_k = ns[rows], nc[rows]
        w = max(8, -(-int((ns_k + nc_k).max(initial=0)) // 8) * 8)
        mat = np.full((rows.size, w), _PAD, np.uint64)
        mat[np.arange(w) < ns_k[:, None]] = ks_k  # the sample's keys, by a boolean mask
        if nc_k.any():  # the candidate's after them (few: a fancy assignment)
            at = np.repeat(np.arange(rows.size), nc_k)
            j = np.arange(at.size) - np.repeat(np.cumsum(nc_k) - nc_k, nc_k)
            mat[at, ns_k[at] + j] = kc[c0[rows][at] + j]
        mat.sort(axis=1)
        eq[rows], inter[rows] = _neighbour_counts(mat)
        width[rows] = w
    pad_pairs = np.maximum(width - n - 1, 0)  # neighbouring pads
    distinct = n - (eq - pad_pairs)
    return inter, distinct - inter


def _neighbour_counts(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a row-sorted ``[R, W]`` uint64 matrix (``W`` a multiple of 8): the number
    of neighbours ``(j-1, j)`` with XOR 0 and with XOR 1."""
    rows, w = mat.shape
    flat = mat.reshape(-1)
    d = np.empty_like(flat)
    np.bitwise_xor(flat[1:], flat[:-1], out=d[1:])
    d = d.reshape(rows, w)
    out = []
    for value in (0, 1):
        hit = d == np.uint64(value)
        hit[:, 0] = False  # the previous row's last entry is no neighbour
        if w // 8 > 255:
            out.append(np.count_nonzero(hit, axis=1))
            continue
        lanes = hit.view(np.uint64)  # [rows, w / 8]: 8 flags of 0 or 1 per word
        s = lanes[:, 0].copy()
        for k in range(1, w // 8):
            s += lanes[:, k]
        s *= _ONES  # the byte lanes' sum lands in the top byte
        out.append((s >> np.uint64(56)).astype(np.int64))
    return out[0], out[1]


def corpus_consistency(source: Any, *, chunk_rows: int = 1 << 18):
    """``consistency`` per trajectory of a self-consistency corpus (DESIGN.md: protocol
    ``self_consistency``, one trajectory per question, round 0 holding the ``k`` samples as
    agents in ``texts``, the candidate in ``final_answer``), streamed chunk by chunk.

    Returns a Polars DataFrame ``trajectory_id`` (str), ``consistency`` (float64, in [0, 1]).
    Raises ValueError when the corpus lacks ``texts`` or ``final_answer``.
    """
    import polars as pl

    from fastuq.io.readers import iter_chunks

    parts = []
    for chunk in iter_chunks(source, columns=["trajectory_id", "texts", "final_answer"],
                             chunk_rows=chunk_rows):
        table = chunk.table
        rounds = table.column("texts").combine_chunks()
        scores = consistency_scores(table.column("final_answer").combine_chunks(),
                                    _first_round(rounds))
        parts.append(pl.DataFrame({
            "trajectory_id": pl.Series(table.column("trajectory_id").combine_chunks())
            .cast(pl.String),
            "consistency": scores,
        }))
    if not parts:
        raise ValueError(f"{source}: the corpus is empty")
    return pl.concat(parts)


def _first_round(rounds):
    """``[N]`` list of the first round's texts (null where a trajectory has no round: no
    usable sample)."""
    import polars as pl

    return pl.Series(rounds).cast(pl.List(pl.List(pl.String))).list.first().to_arrow()
