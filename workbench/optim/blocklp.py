"""The block LP that the look-ahead and the hindsight plan share: build, solve, read.

Both plan many slots at once: slots are grouped into blocks ``b`` of ``len_b`` consecutive
slots, and every job ``j`` may run, in each block of its window, one of its configurations
``k`` (:class:`BlockConfig`: datacenter ``d_k``, pool ``p_k``, ``n_k`` GPUs, work per slot
``r_k``, energy per slot ``E_k``). The receding-horizon look-ahead
(:mod:`workbench.policies.lookahead`) solves it over the forecast window at every re-plan;
the hindsight plan (:mod:`workbench.policies.offline`) once over the whole horizon on the
truth. What differs between them (prices, windows, the work each job needs, moving data,
integrality) is data of :class:`BlockProblem`; the model is this one.

Columns (:func:`_add_variables`)::

    x[j,b,k] in [0, len_jb]   slots of block b that job j runs configuration k
                              (len_jb: the slots of b inside the job's window)
    m[j,d]   in [0, 1]        job j moves its data to datacenter d first (look-ahead)
    short_j  >= 0             work of training job j that does not fit (fraction of the job)
    s        >= 0             carbon above the cap, kg (bound 0 without a cap)
    z[j,b,k] in {0, 1}        configuration chosen (exact mode, blocks of one slot)

With a :class:`~workbench.optim.supplylp.SupplyBlock` the balanced sites' energy goes
through their renewables, batteries and the grid, and their billing periods' peaks are
variables (:mod:`workbench.optim.supplylp`: its columns and rows).

Model (:func:`_add_objective`; the rows, one function each, :func:`_add_constraints`)::

    min  sum c_x x + sum M_jd m + w_short sum_j short_j + w_carbon s
    s.t. sum_k x[j,b,k] <= len_jb            training job j, block b  (one at a time)
         sum_k x[j,b,k]  = len_jb            inference job j, block b (its active slots)
         sum n_k x[j,b,k] <= C_p len_b       pool p, block b          (shared capacity)
         sum P_k x[j,b,k] <= Pcap_d len_b    datacenter d, block b    (power cap, kW;
                                             at a site with own supply: its grid import)
         sum_{k at d} x[j,b,k] <= len_jb m[j,d]                       (move before running)
         sum r_k x[j,.,k] - l_jd m[j,d] + short_j >= need_j           (work, training j)
         sum_{x in g} g_x x - s <= cap_g     carbon group g           (carbon cap, kg)
         sum_k z[j,b,k] <= 1 (= 1 inference),  sum n_k z <= C_p,  x <= len_jb z  (exact)

with ``P_k = E_k * 3600 / slot_s`` the configuration's average facility power (kW) and
``g_x`` the column's carbon per slot run (kg). The caller gives ``c_x`` (energy cost and
whatever it adds), ``M_jd`` (the cost of moving), ``l_jd`` (work lost moving), ``need_j``
and the penalty weights ``w_short``, ``w_carbon`` (:func:`penalty_weight`: large enough that
the model falls short or exceeds the cap only where nothing else fits). In exact mode the
binaries ``z`` carry the slot's integral choice and ``x`` the part of it a job uses (a
finishing job pays only the part of its last slot it needs).

:func:`create_block_lp` builds the model, :func:`solve_block_lp` solves it and returns
HiGHS's status unjudged, :func:`extract_block_solution` reads the named parts back;
:func:`solve_block_problem` does the three in one call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from workbench.optim import supplylp
from workbench.optim.blockdata import (  # noqa: F401 - the block LP's records, read as blocklp.X
    BlockConfig,
    BlockKeys,
    BlockMoves,
    ConfigArrays,
    block_columns,
    penalty_weight,
)
from workbench.optim.highs import (
    Basis,
    HighsResult,
    SparseLp,
    get_basis,
    new_highs,
    solve,
)
from workbench.optim.supplylp import SupplyBlock, SupplySolution
from workbench.optim.warm import BlockBasis, keep_basis, map_basis, pack_key

ROW_ORDER = ("choice", "pool", "power", "move", "work", "carbon")
"""The row blocks of the block LP, in the order of the module docstring."""

OVER_FACTOR = 10.0
"""A kWh imported beyond a limit at a site with own supply (:mod:`workbench.optim.supplylp`'s
``over``) weighs this many times the shortfall weight (a whole job's work undone): the
plan keeps every limit it can, and stays a plan where it cannot."""


@dataclass(frozen=True)
class BlockProblem:
    """The block LP's data as arrays (see the module docstring); per-column arrays share
    the column axis ``X`` of ``x[j,b,k]``.

    Attributes
    ----------
    block_len : int array (B,)
        Slots per block.
    job, block : int arrays (X,)
        Job (index into ``must_run``) and block of each column.
    slots : float array (X,)
        ``len_jb``, the column's bound (slots of the block inside the job's window).
    cost : float array (X,)
        ``c_x``, objective weight per slot run.
    configs : ConfigArrays
        The column's configuration (one entry per column): ``n_k``, ``p_k``, ``d_k``, ``E_k``.
    rate : float array (X,)
        ``r_k``, work per slot run (fraction of the job).
    carbon_kg : float array (X,)
        ``g_x``, carbon per slot run.
    must_run : bool array (J,)
        True for an inference service (it runs exactly its active slots).
    work_jobs : int array (W,)
        The training jobs, each with a work row (in this order).
    need : float array (W,)
        ``need_j``, work each must do (fraction of the job).
    pool_capacity : float array (P,)
        ``C_p``, accelerators per pool.
    slot_s : float
        Slot length, s.
    power_cap_kw : float array (D,) or (D, B), or None
        ``Pcap_d`` per datacenter, or ``Pcap_db`` per datacenter and block (a grid event's
        lower limit in its blocks), kW (``inf``: none); None: no power rows. Below 0 where
        an event limits a site's import below its idle load: a site with own supply then
        serves the rest of its idle load from it (:mod:`workbench.optim.supplylp`'s
        ``D[s,b]``); elsewhere it counts as 0.
    carbon_group : int array (X,) or None
        Carbon-cap group of each column (-1: not capped); None: no carbon rows.
    carbon_cap_kg : float array (G,)
        ``cap_g`` per group.
    shortfall_weight, carbon_slack_weight : float
        ``w_short`` (per job-fraction) and ``w_carbon`` (per kg).
    moves : BlockMoves, optional
    exact : bool
        Add the binaries ``z`` (blocks of one slot).
    supply : SupplyBlock, optional
        The balanced sites' energy balance, batteries and peaks (:mod:`workbench.optim.
        supplylp`): their jobs' columns then carry no energy price (``cost``) nor carbon
        (``carbon_kg``) of their own; the caller leaves those out.
    row_order : tuple of str
        The order of the row blocks (a permutation of :data:`ROW_ORDER`). The model does
        not depend on it, HiGHS's path to an optimum does: a caller keeps the order its
        plans were checked with.
    keys : BlockKeys, optional
        What identifies columns and rows from one solve to the next (needed to keep a
        basis, :class:`BlockBasis`, and to start from one).
    """

    block_len: NDArray[np.int64]
    job: NDArray[np.int64]
    block: NDArray[np.int64]
    slots: NDArray[np.float64]
    cost: NDArray[np.float64]
    configs: ConfigArrays
    rate: NDArray[np.float64]
    carbon_kg: NDArray[np.float64]
    must_run: NDArray[np.bool_]
    work_jobs: NDArray[np.int64]
    need: NDArray[np.float64]
    pool_capacity: NDArray[np.float64]
    slot_s: float
    shortfall_weight: float
    carbon_slack_weight: float
    power_cap_kw: NDArray[np.float64] | None = None
    carbon_group: NDArray[np.int64] | None = None
    carbon_cap_kg: NDArray[np.float64] | None = None
    moves: BlockMoves | None = None
    exact: bool = False
    row_order: tuple[str, ...] = ROW_ORDER
    keys: BlockKeys | None = None
    supply: SupplyBlock | None = None

    def __post_init__(self) -> None:
        x = self.job.size
        for name in ("block", "slots", "cost", "rate", "carbon_kg"):
            if getattr(self, name).shape != (x,):
                raise ValueError(f"BlockProblem.{name} must have shape ({x},) like job")
        if self.configs.pool.shape != (x,):
            raise ValueError(f"BlockProblem.configs must hold one entry per column ({x})")
        if self.need.shape != self.work_jobs.shape:
            raise ValueError("BlockProblem.need needs one entry per work job")
        if (self.carbon_group is None) != (self.carbon_cap_kg is None):
            raise ValueError("BlockProblem.carbon_group and carbon_cap_kg come together")
        if sorted(self.row_order) != sorted(ROW_ORDER):
            raise ValueError(f"BlockProblem.row_order must order {ROW_ORDER}, "
                             f"got {self.row_order}")

    @property
    def n_blocks(self) -> int:
        return int(self.block_len.size)

    @property
    def n_x(self) -> int:
        return int(self.job.size)


def _add_variables(lp: SparseLp, prob: BlockProblem) -> None:
    """Columns ``x`` (bound ``len_jb``), ``m`` (bound 1), ``short``, ``s`` and, exact, ``z``."""
    lp.add_columns("x", prob.slots)
    lp.add_columns("move", np.ones(0 if prob.moves is None else prob.moves.job.size))
    lp.add_columns("short", np.full(prob.work_jobs.size, np.inf))
    lp.add_columns("slack", np.array([np.inf if prob.carbon_group is not None else 0.0]))
    if prob.exact:
        lp.add_columns("z", np.ones(prob.n_x), integral=True)
    if prob.supply is not None:
        supplylp.add_columns(lp, prob.supply, prob.block_len, _grid_cap_kwh(prob))


def _power_cap_db(prob: BlockProblem) -> NDArray[np.float64] | None:
    """``Pcap_db`` (D, B), kW; None without power rows."""
    if prob.power_cap_kw is None:
        return None
    cap = prob.power_cap_kw
    return (np.repeat(cap[:, None], prob.n_blocks, axis=1) if cap.ndim == 1
            else np.asarray(cap, dtype=float))


def _own_cap_kwh(prob: BlockProblem) -> NDArray[np.float64] | None:
    """``Pcap_db len_b h`` of each balanced site with own supply (S, B), kWh (``inf``
    elsewhere; negative where a grid event's limit lies below the site's idle load); None:
    no caps."""
    cap = _power_cap_db(prob)
    if cap is None or prob.supply is None:
        return None
    sb = prob.supply
    own = supplylp.own_supply(sb)
    h = prob.slot_s / 3600.0
    return np.where(own[:, None], cap[sb.site_dc] * prob.block_len[None, :] * h, np.inf)


def _grid_cap_kwh(prob: BlockProblem) -> NDArray[np.float64] | None:
    """The grid import bound of each balanced site with own supply (S, B), kWh: its power
    cap moves from the jobs' power row to its grid column, so that its sources and battery
    may serve the jobs beyond it (``max(Pcap_db, 0) len_b h``; ``inf`` elsewhere). None: no
    caps."""
    cap = _own_cap_kwh(prob)
    return None if cap is None else np.maximum(cap, 0.0)


def _idle_deficit_kwh(prob: BlockProblem) -> NDArray[np.float64] | None:
    """``D[s,b]`` (S, B), kWh: the idle load a site's own supply must serve where a grid
    event's limit lies below it (``max(-Pcap_db, 0) len_b h``, :mod:`workbench.optim.
    supplylp`); None: none anywhere."""
    cap = _own_cap_kwh(prob)
    if cap is None or not np.any(cap < 0):
        return None
    return np.maximum(-cap, 0.0)


def _add_objective(lp: SparseLp, prob: BlockProblem) -> None:
    """``min sum c_x x + sum M_jd m + w_short sum short + w_carbon s`` (``z`` weighs 0)."""
    lp.set_cost("x", prob.cost)
    if prob.moves is not None:
        lp.set_cost("move", prob.moves.cost)
    lp.set_cost("short", prob.shortfall_weight)
    lp.set_cost("slack", prob.carbon_slack_weight)
    if prob.supply is not None:
        supplylp.set_costs(lp, prob.supply, OVER_FACTOR * prob.shortfall_weight)


def _job_blocks(prob: BlockProblem) -> tuple[NDArray[np.int64], NDArray[np.int64],
                                              NDArray[np.float64], NDArray[np.bool_]]:
    """The (job, block) pairs with columns: their keys ``j * B + b``, each column's pair,
    ``len_jb`` and whether the job must run."""
    n_b = prob.n_blocks
    uniq, inv = np.unique(prob.job * n_b + prob.block, return_inverse=True)
    len_jb = np.zeros(uniq.size)
    np.maximum.at(len_jb, inv, prob.slots)
    must = prob.must_run[uniq // n_b] if uniq.size else np.zeros(0, dtype=bool)
    return uniq, inv, len_jb, must


def _add_choice_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum_k x[j,b,k] <= len_jb`` (``= len_jb`` for an inference service), one row per
    (job, block): one configuration at a time; inference exactly its active slots."""
    uniq, inv, len_jb, must = _job_blocks(prob)
    lp.add_rows("choice", inv, np.arange(prob.n_x), np.ones(prob.n_x), uniq.size,
                np.where(must, len_jb, -np.inf), len_jb)


def _add_pool_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum n_k x[j,b,k] <= C_p len_b`` per pool and block: the contention jobs share."""
    n_b, n_p = prob.n_blocks, prob.pool_capacity.size
    lp.add_rows("pool", prob.configs.pool * n_b + prob.block, np.arange(prob.n_x),
                prob.configs.n_gpus, n_p * n_b, np.full(n_p * n_b, -np.inf),
                np.repeat(prob.pool_capacity, n_b) * np.tile(prob.block_len, n_p))


def _add_power_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum P_k x[j,b,k] <= Pcap_d len_b`` per datacenter and block, with
    ``P_k = E_k * 3600 / slot_s`` kW (no rows without a power cap; a balanced site with own
    supply keeps its cap on its grid column instead, :func:`_grid_cap_kwh`)."""
    cap = _power_cap_db(prob)
    if cap is None:
        return
    if prob.supply is not None:
        sb = prob.supply
        cap = cap.copy()
        cap[sb.site_dc[supplylp.own_supply(sb)]] = np.inf
    n_b, n_d = prob.n_blocks, cap.shape[0]
    per_block = np.maximum(cap, 0.0).reshape(-1)
    lp.add_rows("power", prob.configs.dc * n_b + prob.block, np.arange(prob.n_x),
                prob.configs.energy_kwh * 3600.0 / prob.slot_s, n_d * n_b,
                np.full(n_d * n_b, -np.inf), per_block * np.tile(prob.block_len, n_d))


def _move_row_groups(prob: BlockProblem, moves: BlockMoves
                     ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64],
                                NDArray[np.int64]]:
    """The move rows' (move, block) pairs: the ``x`` columns that need a move, their move
    column, the pairs' keys ``m * B + b`` (sorted: the rows' order) and each column's row."""
    ax = np.flatnonzero(moves.of_x >= 0)
    mcol = moves.of_x[ax]
    g_u, g_inv = np.unique(mcol * prob.n_blocks + prob.block[ax], return_inverse=True)
    return ax, mcol, g_u, g_inv


def _add_move_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum_{k at d} x[j,b,k] - len_jb m[j,d] <= 0`` per (move, block): a job runs away
    from its data only once it has moved them (no rows without moves)."""
    moves = prob.moves
    if moves is None or moves.job.size == 0:
        return
    ax, mcol, g_u, g_inv = _move_row_groups(prob, moves)
    g_len = np.zeros(g_u.size)
    np.maximum.at(g_len, g_inv, prob.slots[ax])
    g_m = np.zeros(g_u.size, dtype=np.int64)
    g_m[g_inv] = mcol
    lp.add_rows("move", np.concatenate([g_inv, np.arange(g_u.size)]),
                np.concatenate([ax, lp.cols["move"].start + g_m]),
                np.concatenate([np.ones(ax.size), -g_len]), g_u.size,
                np.full(g_u.size, -np.inf), np.zeros(g_u.size))


def _add_work_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum r_k x[j,.,k] - l_jd m[j,d] + short_j >= need_j``, one row per training job."""
    n_w = prob.work_jobs.size
    pos = np.full(prob.must_run.size, -1, dtype=np.int64)
    pos[prob.work_jobs] = np.arange(n_w)
    tr = np.flatnonzero(pos[prob.job] >= 0)
    moves = prob.moves
    m_rows = np.zeros(0, np.int64) if moves is None else pos[moves.job]
    m_lost = np.zeros(0) if moves is None else moves.lost
    lp.add_rows("work", np.concatenate([pos[prob.job[tr]], m_rows, np.arange(n_w)]),
                np.concatenate([tr, lp.cols["move"].start + np.arange(m_rows.size),
                                lp.cols["short"].start + np.arange(n_w)]),
                np.concatenate([prob.rate[tr], -m_lost, np.ones(n_w)]), n_w, prob.need,
                np.full(n_w, np.inf))


def _add_carbon_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum_{x in g} g_x x - s <= cap_g`` per carbon group (one slack ``s`` for all; no
    rows without a cap)."""
    if prob.carbon_group is None or prob.carbon_cap_kg is None:
        return
    sel = prob.carbon_group >= 0
    n_g = prob.carbon_cap_kg.size
    rows: list[NDArray[np.int64]] = [prob.carbon_group[sel], np.arange(n_g)]
    cols: list[NDArray[np.int64]] = [np.flatnonzero(sel), np.full(n_g, lp.cols["slack"].start)]
    vals: list[NDArray[np.float64]] = [prob.carbon_kg[sel], -np.ones(n_g)]
    if prob.supply is not None:
        # The balanced sites' carbon: their grid import's and their sources'.
        r, c, v = supplylp.carbon_entries(lp, prob.supply)
        rows.append(r)
        cols.append(c)
        vals.append(v)
    lp.add_rows("carbon", np.concatenate(rows), np.concatenate(cols), np.concatenate(vals),
                n_g, np.full(n_g, -np.inf), prob.carbon_cap_kg)


def _add_exact_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """On the binaries ``z``: ``sum_k z[j,b,k] <= 1`` (``= 1`` inference),
    ``sum n_k z <= C_p`` per pool and block, and ``x - len_jb z <= 0`` per column."""
    uniq, inv, _, must = _job_blocks(prob)
    n_b, n_p, n_x = prob.n_blocks, prob.pool_capacity.size, prob.n_x
    cols = np.arange(n_x)
    z = lp.cols["z"].start + cols
    lp.add_rows("z_choice", inv, z, np.ones(n_x), uniq.size, np.where(must, 1.0, -np.inf),
                np.ones(uniq.size))
    lp.add_rows("z_pool", prob.configs.pool * n_b + prob.block, z, prob.configs.n_gpus,
                n_p * n_b, np.full(n_p * n_b, -np.inf), np.repeat(prob.pool_capacity, n_b))
    lp.add_rows("z_link", np.concatenate([cols, cols]), np.concatenate([cols, z]),
                np.concatenate([np.ones(n_x), -prob.slots]), n_x, np.full(n_x, -np.inf),
                np.zeros(n_x))


_ROW_BUILDERS = {"choice": _add_choice_rows, "pool": _add_pool_rows, "power": _add_power_rows,
                 "move": _add_move_rows, "work": _add_work_rows, "carbon": _add_carbon_rows}


def _add_constraints(lp: SparseLp, prob: BlockProblem) -> None:
    """The row blocks in ``prob.row_order``, then in exact mode the rows of ``z``."""
    for name in prob.row_order:
        _ROW_BUILDERS[name](lp, prob)
    if prob.supply is not None:
        supplylp.add_rows(lp, prob.supply, prob.configs.dc, prob.block,
                          prob.configs.energy_kwh, prob.block_len, _idle_deficit_kwh(prob))
    if prob.exact:
        _add_exact_rows(lp, prob)


def create_block_lp(prob: BlockProblem) -> SparseLp:
    """Build the block LP (see the module docstring) in three named phases."""
    lp = SparseLp()
    _add_variables(lp, prob)
    _add_constraints(lp, prob)
    _add_objective(lp, prob)
    return lp


def solve_block_lp(lp: SparseLp, *, time_limit_s: float,
                   mip_rel_gap: float | None = None, basis: Basis | None = None,
                   keep_basis: bool = False, presolve: bool | None = None
                   ) -> tuple[HighsResult, Basis | None]:
    """Solve with HiGHS, from ``basis`` when given (an LP's warm start); the status is
    returned for the caller to judge (``optimal``, or a MILP's incumbent at its time
    limit), with the final basis when ``keep_basis`` (else None). ``presolve`` None keeps
    HiGHS's default (on)."""
    h = new_highs(time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap, presolve=presolve)
    lp.pass_to(h)
    res = solve(h, basis=basis)
    return res, (get_basis(h, lp, res.x, res.row_value) if keep_basis and res.optimal
                 else None)


@dataclass(frozen=True)
class BlockSolution:
    """The block LP's solution by name.

    ``x``, ``move``, ``short`` (one per work job), ``slack_kg`` and ``work_dual`` (the work
    rows' duals: the price of a unit of each job's progress) are set only when ``complete``
    (HiGHS returned a value for every column); empty otherwise. ``pool_price`` (pools x
    blocks) is the capacity price of a GPU-slot, ``-dual >= 0`` of each pool row, and
    ``carbon_price`` the price of a kg under each carbon group's cap (currency/kg), when
    HiGHS returned the duals; empty otherwise. ``status`` is HiGHS's own;
    ``n_columns`` counts every column of the model.
    """

    status: str
    optimal: bool
    time_limit: bool
    complete: bool
    x: NDArray[np.float64]
    move: NDArray[np.float64]
    short: NDArray[np.float64]
    slack_kg: float
    work_dual: NDArray[np.float64]
    mip_dual_bound: float
    mip_gap: float
    solve_s: float
    n_columns: int
    iterations: int = 0
    basis: BlockBasis | None = None
    warm: bool = False
    pool_price: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))
    carbon_price: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    supply: SupplySolution | None = None


def extract_block_solution(lp: SparseLp, res: HighsResult, prob: BlockProblem
                           ) -> BlockSolution:
    """Read ``x``, ``m``, ``short``, ``s``, the work duals, the prices of capacity and
    carbon and (with ``prob.supply``) the supply columns back from a HiGHS result of
    ``prob``'s model ``lp``."""
    complete = res.x.size == lp.n_cols
    x = res.x if complete else np.zeros(lp.n_cols)
    duals = res.row_dual if complete and res.row_dual.size == lp.n_rows else None
    empty = np.zeros(0)
    return BlockSolution(
        status=res.status, optimal=res.optimal, time_limit=res.time_limit, complete=complete,
        x=x[lp.cols["x"]] if complete else empty,
        move=x[lp.cols["move"]] if complete else empty,
        short=x[lp.cols["short"]] if complete else empty,
        slack_kg=float(x[lp.cols["slack"].start]),
        work_dual=duals[lp.rows["work"]] if duals is not None else empty,
        mip_dual_bound=res.mip_dual_bound, mip_gap=res.mip_gap, solve_s=res.solve_s,
        n_columns=lp.n_cols, iterations=res.iterations,
        pool_price=(np.maximum(-duals[lp.rows["pool"]], 0.0).reshape(-1, prob.n_blocks)
                    if duals is not None and prob.n_blocks else np.zeros((0, 0))),
        carbon_price=(np.maximum(-duals[lp.rows["carbon"]], 0.0)
                      if duals is not None and "carbon" in lp.rows else np.zeros(0)),
        supply=(supplylp.extract(lp, res, prob.supply)
                if prob.supply is not None and complete else None))


def solve_block_problem(prob: BlockProblem, *, time_limit_s: float,
                        mip_rel_gap: float | None = None, warm: BlockBasis | None = None,
                        keep_basis: bool = False, presolve: bool | None = None
                        ) -> BlockSolution:
    """Create, solve and extract in one call; check ``optimal``/``complete`` on the result.

    ``warm``: the basis of an earlier solve (:attr:`BlockSolution.basis`), mapped onto this
    model by :func:`warm_basis` and handed to HiGHS as its starting point (an LP only; the
    optimum is the same, the path to it shorter). ``keep_basis``: return this solve's basis
    by key (``prob.keys`` needed for either). ``presolve``: HiGHS's presolve (None: its
    default, on).
    """
    lp = create_block_lp(prob)
    start = None
    if warm is not None and prob.keys is not None and not prob.exact:
        start = warm_basis(warm, prob, lp)
    res, final = solve_block_lp(
        lp, time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap, basis=start,
        keep_basis=keep_basis and prob.keys is not None and not prob.exact, presolve=presolve)
    sol = extract_block_solution(lp, res, prob)
    basis = None if final is None else keep_block_basis(prob, lp, final)
    return replace(sol, basis=basis, warm=start is not None)


# -- warm start: a basis by key (the mapping in workbench.optim.warm) -------------------
def _entity_keys(prob: BlockProblem) -> tuple[
        dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]],
        dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]]]:
    """Identity and block of every column and row, per group, in the model's order (the
    groups :func:`create_block_lp` builds; others, and the exact mode's, have none)."""
    assert prob.keys is not None
    jk = prob.keys.job
    none = np.zeros(0, dtype=np.int64)
    n_b = prob.n_blocks
    blocks = np.arange(n_b, dtype=np.int64)
    cols: dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]] = {
        "x": (pack_key(jk[prob.job], prob.configs.pool, prob.configs.n_gpus.astype(np.int64)),
              prob.block),
        "short": (pack_key(jk[prob.work_jobs]), np.full(prob.work_jobs.size, -1)),
        "slack": (np.zeros(1, dtype=np.int64), np.full(1, -1))}
    uniq, _, _, _ = _job_blocks(prob)
    rows: dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]] = {
        "choice": (pack_key(jk[uniq // n_b]) if uniq.size else none, uniq % n_b),
        "pool": (pack_key(0, np.repeat(np.arange(prob.pool_capacity.size), n_b)),
                 np.tile(blocks, prob.pool_capacity.size)),
        "work": (pack_key(jk[prob.work_jobs]), np.full(prob.work_jobs.size, -1))}
    if prob.power_cap_kw is not None:
        n_d = prob.power_cap_kw.shape[0]
        rows["power"] = (pack_key(0, np.repeat(np.arange(n_d), n_b)), np.tile(blocks, n_d))
    if prob.carbon_cap_kg is not None:
        rows["carbon"] = (pack_key(0, 0, np.arange(prob.carbon_cap_kg.size)),
                          np.full(prob.carbon_cap_kg.size, -1))
    moves = prob.moves
    if moves is not None and moves.job.size:
        dcm = np.zeros(moves.job.size, dtype=np.int64)
        ax = np.flatnonzero(moves.of_x >= 0)
        dcm[moves.of_x[ax]] = prob.configs.dc[ax]
        cols["move"] = (pack_key(jk[moves.job], dcm), np.full(moves.job.size, -1))
        _, _, g_u, _ = _move_row_groups(prob, moves)
        m = g_u // n_b
        rows["move"] = (pack_key(jk[moves.job[m]], dcm[m]), g_u % n_b)
    else:
        cols["move"] = (none, none)
    return cols, rows


def keep_block_basis(prob: BlockProblem, lp: SparseLp, basis: Basis) -> BlockBasis:
    """The basis of a solve of ``prob`` (built as ``lp``) by key, for :func:`warm_basis`."""
    assert prob.keys is not None
    ck, rk = _entity_keys(prob)
    return keep_basis(ck, rk, lp, basis, prob.keys.block_start, prob.block_len)


def warm_basis(old: BlockBasis, prob: BlockProblem, lp: SparseLp) -> Basis:
    """``old``'s basis on the model ``lp`` of ``prob`` (:func:`workbench.optim.warm.map_basis`:
    each entry takes the status of the same entity in the old block that held its block's
    first slot; HiGHS is told the basis is alien and repairs it)."""
    assert prob.keys is not None
    ck, rk = _entity_keys(prob)
    return map_basis(old, ck, rk, lp, prob.keys.block_start)
