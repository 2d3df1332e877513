"""Text features over integer token ids: TfIdfVectorizer. Each n-gram of the pool is
counted in every row by comparing it with the row's windows (the tokens at a start and
every skip distance after it, gathered by constant positions): equal at every token, a
window is one occurrence. The counts go to their output columns by one GEMM with a 0/1
matrix, then the mode's weighting. Strings have no device dtype, so a pool of strings is
refused."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, check_const_size

# Window positions times pool n-grams times tokens a comparison holds for one row: the
# largest temporary the counting makes per input row.
_MAX_COMPARED = 1 << 24


def tfidf_vectorizer(cx: Ctx, node: Any, at: Attrs) -> list:
    """Counts of each pool n-gram (sizes min_gram_length to max_gram_length, its tokens
    skip_distance apart for every distance up to max_skip_count + 1; unigrams once), in the
    output column ngram_indexes gives; TF as counted, IDF 1 (or the n-gram's weight) where
    counted, TFIDF the count times the weight (the spec's i-th weight is the pool's i-th
    n-gram's, as onnxruntime takes it)."""
    if at.get("pool_strings"):
        raise Unsupported("pool_strings: the device holds no strings (use token ids)")
    x = cx.sym(node.input[0])
    if not cx.dtype(x).is_integer:
        raise Invalid(f"X must hold integer token ids, not {cx.dtype(x).name}")
    shape = cx.shape(x)
    if len(shape) not in (1, 2):
        raise Invalid(f"X has shape {shape}; TfIdfVectorizer takes [C] or [N, C]")
    rows = x if len(shape) == 2 else cx.reshape(x, (1, shape[0]))
    if cx.dtype(rows).name != "int64":
        rows = cx.op("cast", rows, to="int64")
    n, width = cx.shape(rows)
    low, high = int(at.get("min_gram_length")), int(at.get("max_gram_length"))
    skips = int(at.get("max_skip_count"))
    mode = at.get("mode")
    pool = [int(v) for v in at.get("pool_int64s") or []]
    starts = [int(v) for v in at.get("ngram_counts") or []]
    columns = [int(v) for v in at.get("ngram_indexes") or []]
    weights = [float(v) for v in at.get("weights") or []]
    if mode not in ("TF", "IDF", "TFIDF"):
        raise Invalid(f"mode={mode}: TF, IDF or TFIDF")
    if not 1 <= low <= high or skips < 0:
        raise Invalid(f"gram lengths {low}..{high} and max_skip_count {skips} out of range")
    grams = _pool_grams(pool, starts)
    if len(columns) != len(grams) or min(columns, default=0) < 0:
        raise Invalid(f"ngram_indexes gives {len(columns)} columns for {len(grams)} n-grams")
    out = max(columns) + 1 if columns else 0
    check_const_size((len(grams), out), 8, "TfIdfVectorizer's n-gram-to-column matrix")
    if weights and len(weights) != len(grams):
        raise Invalid(f"weights holds {len(weights)} values for {len(grams)} n-grams")
    counts = []
    for size in sorted({len(g) for g in grams}):
        table = np.asarray([g for g in grams if len(g) == size], np.int64)
        if not low <= size <= high:
            counts.append(cx.op("fill", shape=[n, len(table)], value=0.0, dtype="float"))
            continue
        counts.append(_count(cx, rows, table, range(1, 2 if size == 1 else skips + 2), width))
    if not counts:
        raise Invalid("the pool holds no n-grams")
    total = counts[0] if len(counts) == 1 else cx.op("concat", *counts, axis=1)
    order = [i for size in sorted({len(g) for g in grams}) for i, g in enumerate(grams)
             if len(g) == size]  # fmt: skip
    to_column = np.zeros((len(grams), out))
    for k, i in enumerate(order):
        to_column[k, columns[i]] = 1.0
    y = cx.op("gemm", total, cx.param(to_column.astype(np.float32), stem="ngram_columns"))
    per_column = np.ones(out, np.float32)  # each n-gram's weight, in its output column
    for i, w in enumerate(weights):
        per_column[columns[i]] = w
    scale = cx.param(per_column, stem="idf_weights")
    if mode == "IDF":
        found = cx.op("cast", cx.op("greater", y, cx.param(np.zeros(1, np.float32))), to="float")
        y = cx.op("mul", found, scale) if weights else found
    elif mode == "TFIDF" and weights:
        y = cx.op("mul", y, scale)
    return [y if len(shape) == 2 else cx.reshape(y, (out,))]


def _pool_grams(pool: list[int], starts: list[int]) -> list[tuple[int, ...]]:
    """The pool's n-grams in id order: ngram_counts[k] is where those of k + 1 tokens
    start."""
    if not starts or starts[0] != 0 or any(b < a for a, b in itertools.pairwise(starts)):
        raise Invalid(f"ngram_counts {starts} must start at 0 and not decrease")
    grams = []
    for k, begin in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(pool)
        if end > len(pool) or (end - begin) % (k + 1):
            raise Invalid(f"pool entries {begin}..{end} do not make n-grams of {k + 1}")
        grams += [tuple(pool[i : i + k + 1]) for i in range(begin, end, k + 1)]
    return grams


def _count(cx: Ctx, rows: Symbol, table: np.ndarray, distances: range, width: int) -> Symbol:
    """[N, grams]: how many windows of each row equal each n-gram of `table` ([grams,
    size]), over the skip distances given."""
    grams, size = table.shape
    found = None
    for d in distances:
        places = width - (size - 1) * d
        if places <= 0:  # nor at any longer distance: max_skip_count 2**31 took minutes
            break
        if places * grams * size > _MAX_COMPARED:
            raise Unsupported(f"{places} windows against {grams} n-grams of {size} (more "
                              f"than {_MAX_COMPARED} comparisons a row)")  # fmt: skip
        at = (np.arange(places)[:, None] + np.arange(size) * d).reshape(-1)
        windows = cx.op("gather", rows, cx.param(at.astype(np.int64), stem="ngram_windows"),
                        axis=1)  # fmt: skip
        windows = cx.reshape(windows, (cx.shape(rows)[0], places, 1, size))
        same = cx.op("equal", windows, cx.param(table.reshape(1, 1, grams, size), stem="pool"))
        whole = cx.op("min", cx.op("cast", same, to="float"), axes=[3], keepdims=False)
        count = cx.op("sum", whole, axes=[1], keepdims=False)
        found = count if found is None else cx.op("add", found, count)
    if found is None:
        return cx.op("fill", shape=[cx.shape(rows)[0], grams], value=0.0, dtype="float")
    return found
