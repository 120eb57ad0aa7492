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
    Coords,
    HighsResult,
    SparseLp,
    get_basis,
    new_highs,
    solve,
)
from workbench.optim.supplylp import SupplyBlock, SupplySolution
from workbench.optim.warm import BlockBasis, keep_basis, map_basis

ROW_ORDER = ("choice", "pool", "power", "move", "work", "carbon")
"""The row blocks of the block LP, in the order of the module docstring."""

WARM_COLS = ("x", "move", "short", "slack")
WARM_ROWS = ("choice", "pool", "power", "move", "work", "carbon")
"""The column groups and row blocks whose basis statuses a warm start keeps and maps by their
labels (:mod:`workbench.optim.warm`); the others (the supply's, the exact mode's) start at
HiGHS's default."""

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


def _move_dc(prob: BlockProblem, moves: BlockMoves) -> NDArray[np.int64]:
    """The datacenter each move column takes the job's data to (that of the ``x`` columns
    that need it)."""
    dc = np.zeros(moves.job.size, dtype=np.int64)
    ax = np.flatnonzero(moves.of_x >= 0)
    dc[moves.of_x[ax]] = prob.configs.dc[ax]
    return dc


def _add_variables(lp: SparseLp, prob: BlockProblem) -> None:
    """Columns ``x`` (bound ``len_jb``; labels job, block, pool, GPU count), ``m`` (bound 1;
    job, datacenter), ``short`` (job), ``s`` and, exact, ``z`` (one per ``x``)."""
    lp.add_columns("x", prob.slots, coords=Coords.of(
        job=prob.job, block=prob.block, pool=prob.configs.pool,
        gpus=prob.configs.n_gpus.astype(np.int64)))
    moves = prob.moves
    none = np.zeros(0, dtype=np.int64)
    lp.add_columns("move", np.ones(0 if moves is None else moves.job.size), coords=(
        Coords.of(job=none, dc=none) if moves is None
        else Coords.of(job=moves.job, dc=_move_dc(prob, moves))))
    lp.add_columns("short", np.full(prob.work_jobs.size, np.inf),
                   coords=Coords.of(job=prob.work_jobs))
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


def _choice_rows(prob: BlockProblem) -> tuple[Coords, NDArray[np.float64], NDArray[np.bool_]]:
    """The (job, block) pairs with columns (sorted), each pair's ``len_jb`` and whether its
    job must run."""
    rows = Coords.unique(job=prob.job, block=prob.block)
    len_jb = np.zeros(rows.size)
    np.maximum.at(len_jb, rows.locate(job=prob.job, block=prob.block), prob.slots)
    return rows, len_jb, prob.must_run[rows.label("job")]


def _add_choice_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum_k x[j,b,k] <= len_jb`` (``= len_jb`` for an inference service), one row per
    (job, block): one configuration at a time; inference exactly its active slots."""
    rows, len_jb, must = _choice_rows(prob)
    lp.add_rows("choice", rows, np.arange(prob.n_x), np.ones(prob.n_x),
                np.where(must, len_jb, -np.inf), len_jb, job=prob.job, block=prob.block)


def _pool_rows(prob: BlockProblem) -> Coords:
    return Coords.grid(pool=prob.pool_capacity.size, block=prob.n_blocks)


def _add_pool_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum n_k x[j,b,k] <= C_p len_b`` per pool and block: the contention jobs share."""
    lp.add_rows("pool", _pool_rows(prob), np.arange(prob.n_x), prob.configs.n_gpus, -np.inf,
                (prob.pool_capacity[:, None] * prob.block_len[None, :]).reshape(-1),
                pool=prob.configs.pool, block=prob.block)


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
    lp.add_rows("power", Coords.grid(dc=cap.shape[0], block=prob.n_blocks),
                np.arange(prob.n_x), prob.configs.energy_kwh * 3600.0 / prob.slot_s, -np.inf,
                (np.maximum(cap, 0.0) * prob.block_len[None, :]).reshape(-1),
                dc=prob.configs.dc, block=prob.block)


def _add_move_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum_{k at d} x[j,b,k] - len_jb m[j,d] <= 0`` per (job, datacenter, block) with a
    move: a job runs away from its data only once it has moved them (no rows without
    moves)."""
    moves = prob.moves
    if moves is None or moves.job.size == 0:
        return
    ax = np.flatnonzero(moves.of_x >= 0)
    job, dc, block = prob.job[ax], prob.configs.dc[ax], prob.block[ax]
    rows = Coords.unique(job=job, dc=dc, block=block)
    g_len = np.zeros(rows.size)
    np.maximum.at(g_len, rows.locate(job=job, dc=dc, block=block), prob.slots[ax])
    r_job, r_dc, r_block = rows.label("job"), rows.label("dc"), rows.label("block")
    lp.add_rows("move", rows, np.concatenate([ax, lp.col("move", job=r_job, dc=r_dc)]),
                np.concatenate([np.ones(ax.size), -g_len]), -np.inf, 0.0,
                job=np.concatenate([job, r_job]), dc=np.concatenate([dc, r_dc]),
                block=np.concatenate([block, r_block]))


def _add_work_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum r_k x[j,.,k] - l_jd m[j,d] + short_j >= need_j``, one row per training job."""
    rows = Coords.of(job=prob.work_jobs)
    tr = np.flatnonzero(rows.locate(job=prob.job) >= 0)
    moved = lp.col_coords["move"]
    m_job = moved.label("job")
    m_lost = np.zeros(0) if prob.moves is None else prob.moves.lost
    lp.add_rows("work", rows,
                np.concatenate([tr, lp.col("move", job=m_job, dc=moved.label("dc")),
                                lp.col("short", job=prob.work_jobs)]),
                np.concatenate([prob.rate[tr], -m_lost, np.ones(prob.work_jobs.size)]),
                prob.need, np.inf,
                job=np.concatenate([prob.job[tr], m_job, prob.work_jobs]))


def _add_carbon_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """``sum_{x in g} g_x x - s <= cap_g`` per carbon group (one slack ``s`` for all; no
    rows without a cap)."""
    if prob.carbon_group is None or prob.carbon_cap_kg is None:
        return
    sel = prob.carbon_group >= 0
    n_g = prob.carbon_cap_kg.size
    groups: list[NDArray[np.int64]] = [prob.carbon_group[sel], np.arange(n_g)]
    cols: list[NDArray[np.int64]] = [np.flatnonzero(sel),
                                     np.repeat(lp.col("slack", entry=0), n_g)]
    vals: list[NDArray[np.float64]] = [prob.carbon_kg[sel], -np.ones(n_g)]
    if prob.supply is not None:
        # The balanced sites' carbon: their grid import's and their sources'.
        g, c, v = supplylp.carbon_entries(lp, prob.supply)
        groups.append(g)
        cols.append(c)
        vals.append(v)
    lp.add_rows("carbon", Coords.grid(group=n_g), np.concatenate(cols), np.concatenate(vals),
                -np.inf, prob.carbon_cap_kg, group=np.concatenate(groups))


def _add_exact_rows(lp: SparseLp, prob: BlockProblem) -> None:
    """On the binaries ``z``: ``sum_k z[j,b,k] <= 1`` (``= 1`` inference),
    ``sum n_k z <= C_p`` per pool and block, and ``x - len_jb z <= 0`` per column."""
    rows, _, must = _choice_rows(prob)
    n_x = prob.n_x
    cols = np.arange(n_x)
    z = lp.col("z", entry=cols)
    lp.add_rows("z_choice", rows, z, np.ones(n_x), np.where(must, 1.0, -np.inf), 1.0,
                job=prob.job, block=prob.block)
    lp.add_rows("z_pool", _pool_rows(prob), z, prob.configs.n_gpus, -np.inf,
                np.repeat(prob.pool_capacity, prob.n_blocks),
                pool=prob.configs.pool, block=prob.block)
    lp.add_rows("z_link", Coords.grid(entry=n_x), np.concatenate([cols, z]),
                np.concatenate([np.ones(n_x), -prob.slots]), -np.inf, 0.0,
                entry=np.concatenate([cols, cols]))


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
        x=lp.col_values("x", x) if complete else empty,
        move=lp.col_values("move", x) if complete else empty,
        short=lp.col_values("short", x) if complete else empty,
        slack_kg=float(lp.col_values("slack", x)[0]),
        work_dual=lp.row_values("work", duals) if duals is not None else empty,
        mip_dual_bound=res.mip_dual_bound, mip_gap=res.mip_gap, solve_s=res.solve_s,
        n_columns=lp.n_cols, iterations=res.iterations,
        pool_price=(np.maximum(-lp.row_values("pool", duals), 0.0)
                    if duals is not None and prob.n_blocks else np.zeros((0, 0))),
        carbon_price=(np.maximum(-lp.row_values("carbon", duals), 0.0)
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


# -- warm start: a basis by label (the mapping in workbench.optim.warm) -----------------
def keep_block_basis(prob: BlockProblem, lp: SparseLp, basis: Basis) -> BlockBasis:
    """The basis of a solve of ``prob`` (built as ``lp``) by label, for :func:`warm_basis`."""
    assert prob.keys is not None
    return keep_basis(lp, basis, WARM_COLS, WARM_ROWS, prob.keys.job, prob.keys.block_start,
                      prob.block_len)


def warm_basis(old: BlockBasis, prob: BlockProblem, lp: SparseLp) -> Basis:
    """``old``'s basis on the model ``lp`` of ``prob`` (:func:`workbench.optim.warm.map_basis`:
    each entry takes the status of the entry with the same labels, job by its stable key, in
    the old block that held its block's first slot; HiGHS is told the basis is alien and
    repairs it)."""
    assert prob.keys is not None
    return map_basis(old, lp, WARM_COLS, WARM_ROWS, prob.keys.job, prob.keys.block_start)
