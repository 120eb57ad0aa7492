"""The warm start of the block LP: a solved model's simplex basis kept by what its columns
and rows are (job, pool or datacenter, GPU count, block by its absolute first slot), and
mapped onto the next re-plan's model (:func:`workbench.optim.blocklp.warm_basis`), where
HiGHS takes it as an alien basis and repairs it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workbench.optim.highs import BASIS_BASIC, BASIS_LOWER, Basis, SparseLp

Keys = dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]]
"""Per column group or row block: each entry's identity and block (-1: none)."""

_KEY_BITS = 12


@dataclass(frozen=True)
class BlockBasis:
    """A solved block LP's simplex basis by what its columns and rows are (not where).

    Per column group and row block (the names of :class:`~workbench.optim.highs.SparseLp`):
    each entry's identity (job key, pool or datacenter, GPU count, packed in one integer),
    its block (-1: none) and its ``HighsBasisStatus`` code; with the blocks' absolute first
    slots and lengths, so that a later model's block is matched to the one that held its
    first slot.
    """

    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    cols: dict[str, tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int8]]]
    rows: dict[str, tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int8]]]


def pack_key(job: NDArray[np.int64] | int, a: NDArray[np.int64] | int = 0,
             b: NDArray[np.int64] | int = 0) -> NDArray[np.int64]:
    """One integer per entry: ``job * 2^24 + a * 2^12 + b`` (``a``, ``b`` < 4096)."""
    return ((np.asarray(job, dtype=np.int64) << (2 * _KEY_BITS))
            + (np.asarray(a, dtype=np.int64) << _KEY_BITS) + np.asarray(b, dtype=np.int64))


def keep_basis(cols: Keys, rows: Keys, lp: SparseLp, basis: Basis,
               block_start: NDArray[np.int64], block_len: NDArray[np.int64]) -> BlockBasis:
    """``basis`` of the model ``lp`` by key: the status of every entry of the groups in
    ``cols`` and ``rows`` (those whose size matches the model's), with the blocks' absolute
    first slots and lengths."""

    def pick(keys: Keys, where: dict[str, slice], status: NDArray[np.int8]
             ) -> dict[str, tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int8]]]:
        out = {}
        for name, (ident, blk) in keys.items():
            sl = where.get(name)
            if sl is not None and sl.stop - sl.start == ident.size:
                out[name] = (ident, blk, status[sl])
        return out

    return BlockBasis(block_start=block_start.copy(), block_len=block_len.copy(),
                      cols=pick(cols, lp.cols, basis.col_status),
                      rows=pick(rows, lp.rows, basis.row_status))


def map_basis(old: BlockBasis, cols: Keys, rows: Keys, lp: SparseLp,
              block_start: NDArray[np.int64]) -> Basis:
    """``old``'s basis on the model ``lp`` (whose entries are ``cols`` and ``rows``, its
    blocks starting at the absolute slots ``block_start``): an entry takes the status of the
    same entity (same job, pool or datacenter, GPU count) in the old block that held its
    block's first slot; a column without one starts at its lower bound (0), a row without
    one basic (its slack). The result may be singular or have the wrong count of basic
    variables: HiGHS is told it is *alien* and repairs it."""
    col = np.full(lp.n_cols, BASIS_LOWER, dtype=np.int8)
    row = np.full(lp.n_rows, BASIS_BASIC, dtype=np.int8)
    s = block_start
    ob = np.searchsorted(old.block_start, s, side="right") - 1
    inside = (ob >= 0) & (s < old.block_start[np.maximum(ob, 0)]
                          + old.block_len[np.maximum(ob, 0)])
    old_of = np.where(inside, ob, -2)
    for keys, where, saved, out in ((cols, lp.cols, old.cols, col),
                                    (rows, lp.rows, old.rows, row)):
        for name, (ident, blk) in keys.items():
            sl = where.get(name)
            if sl is None or name not in saved or sl.stop - sl.start != ident.size:
                continue
            o_ident, o_blk, o_status = saved[name]
            new_blk = np.where(blk >= 0, old_of[np.maximum(blk, 0)], -1)
            got = _lookup(o_ident, o_blk, o_status, ident, new_blk)
            seg = out[sl]
            hit = got >= 0
            seg[hit] = got[hit]
    return Basis(col, row)


def _lookup(o_ident: NDArray[np.int64], o_blk: NDArray[np.int64], o_status: NDArray[np.int8],
            ident: NDArray[np.int64], blk: NDArray[np.int64]) -> NDArray[np.int8]:
    """The status of the old entry with the same (identity, block) as each new one, -1 where
    none (a new block -2: no old block held it)."""
    out = np.full(ident.size, -1, dtype=np.int8)
    if not ident.size or not o_ident.size:
        return out
    _, inv = np.unique(np.concatenate([o_ident, ident]), return_inverse=True)
    span = int(max(o_blk.max(initial=0), blk.max(initial=0))) + 3
    oc = inv[:o_ident.size].astype(np.int64) * span + (o_blk + 2)
    nc = inv[o_ident.size:].astype(np.int64) * span + (blk + 2)
    order = np.argsort(oc, kind="stable")
    sorted_oc = oc[order]
    pos = np.minimum(np.searchsorted(sorted_oc, nc), sorted_oc.size - 1)
    hit = (sorted_oc[pos] == nc) & (blk != -2)
    out[hit] = o_status[order[pos[hit]]]
    return out
