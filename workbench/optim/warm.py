"""The warm start of the block LP: a solved model's simplex basis kept by the labels of its
columns and rows (job by its stable key, pool or datacenter, GPU count, block by its
absolute first slot; :class:`~workbench.optim.highs.Coords`), and mapped onto the next
re-plan's model (:func:`workbench.optim.blocklp.warm_basis`), where HiGHS takes it as an
alien basis and repairs it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workbench.optim.highs import BASIS_BASIC, BASIS_LOWER, Basis, Coords, SparseLp

Labels = dict[str, NDArray[np.int64]]
"""Each entry's label per dimension (arrays of one length)."""


@dataclass(frozen=True)
class BlockBasis:
    """A solved block LP's simplex basis by what its columns and rows are (not where).

    Per column group and row block (the names of :class:`~workbench.optim.highs.SparseLp`):
    each entry's labels, with the job label the job's stable key and the block label the
    block's absolute first slot (:func:`absolute_labels`), and its ``HighsBasisStatus``
    code; with the blocks' absolute first slots and lengths, so that a later model's block
    is matched to the one that held its first slot.
    """

    block_start: NDArray[np.int64]
    block_len: NDArray[np.int64]
    cols: dict[str, tuple[Labels, NDArray[np.int8]]]
    rows: dict[str, tuple[Labels, NDArray[np.int8]]]


def absolute_labels(coords: Coords, job_key: NDArray[np.int64],
                    block_start: NDArray[np.int64]) -> Labels:
    """The labels of ``coords``' entries with a job's index replaced by its stable key
    (``job_key``) and a block's by its first slot (``block_start``): what identifies an
    entry from one model to the next."""
    out = {d: coords.label(d) for d in coords.sizes}
    if "job" in out:
        out["job"] = job_key[out["job"]]
    if "block" in out:
        out["block"] = block_start[out["block"]]
    return out


def keep_basis(lp: SparseLp, basis: Basis, cols: tuple[str, ...], rows: tuple[str, ...],
               job_key: NDArray[np.int64], block_start: NDArray[np.int64],
               block_len: NDArray[np.int64]) -> BlockBasis:
    """``basis`` of the model ``lp`` by label: the status of every entry of the column
    groups ``cols`` and row blocks ``rows`` the model has, with the blocks' absolute first
    slots and lengths."""

    def pick(coords: dict[str, Coords], where: dict[str, slice], status: NDArray[np.int8],
             names: tuple[str, ...]) -> dict[str, tuple[Labels, NDArray[np.int8]]]:
        return {n: (absolute_labels(coords[n], job_key, block_start), status[where[n]])
                for n in names if n in where}

    return BlockBasis(block_start=block_start.copy(), block_len=block_len.copy(),
                      cols=pick(lp.col_coords, lp.cols, basis.col_status, cols),
                      rows=pick(lp.row_coords, lp.rows, basis.row_status, rows))


def map_basis(old: BlockBasis, lp: SparseLp, cols: tuple[str, ...], rows: tuple[str, ...],
              job_key: NDArray[np.int64], block_start: NDArray[np.int64]) -> Basis:
    """``old``'s basis on the model ``lp`` (its jobs' stable keys ``job_key``, its blocks
    starting at the absolute slots ``block_start``), for the column groups ``cols`` and row
    blocks ``rows``: an entry takes the status of the old entry with the same labels in the
    old block that held its block's first slot (of several, the first); a column without
    one starts at its lower bound (0), a row without one basic (its slack). The result may
    be singular or have the wrong count of basic variables: HiGHS is told it is *alien* and
    repairs it."""
    col = np.full(lp.n_cols, BASIS_LOWER, dtype=np.int8)
    row = np.full(lp.n_rows, BASIS_BASIC, dtype=np.int8)
    # Each new block labelled by the first slot of the old block that held its first slot
    # (-1: none did, and its entries match nothing).
    ob = np.maximum(np.searchsorted(old.block_start, block_start, side="right") - 1, 0)
    held = old.block_start[ob]
    held = np.where((held <= block_start) & (block_start < held + old.block_len[ob]), held, -1)
    for coords, where, saved, out, names in ((lp.col_coords, lp.cols, old.cols, col, cols),
                                             (lp.row_coords, lp.rows, old.rows, row, rows)):
        for name in names:
            if name not in where or name not in saved:
                continue
            o_labels, o_status = saved[name]
            pos = _match(o_labels, absolute_labels(coords[name], job_key, held))
            seg = out[where[name]]
            hit = pos >= 0
            seg[hit] = o_status[pos[hit]]
    return Basis(col, row)


def _match(old: Labels, new: Labels) -> NDArray[np.int64]:
    """The position of the old entry with each new entry's labels (-1 where none)."""
    sizes = {d: int(max(old[d].max(initial=-1), new[d].max(initial=-1))) + 1 for d in new}
    return Coords(sizes, old).locate(**new)
