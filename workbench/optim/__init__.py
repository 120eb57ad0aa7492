"""The optimisation layer: every model the policies solve, built from arrays, solved by HiGHS.

It sits below the policies (which decide) and above the job model (which predicts): it
imports neither a policy nor the simulator. One module per concept:

========================  =================================================================
:mod:`~.info`             :class:`~.info.SolveInfo`, how one solve went (status, time, gap)
:mod:`~.highs`            the one HiGHS adapter: a quiet ``Highs``, a sparse model in named
                          blocks (:class:`~.highs.SparseLp`), solve and read back
:mod:`~.slot`             the per-slot assignment MILP (:class:`~.slot.SlotProblem`), the
                          readable Pyomo reference: create, solve, extract
:mod:`~.slotarrays`       the same MILP as HiGHS arrays, its LP bound and the LP repair
:mod:`~.fastslot`         the fast path that solves successive slots
                          (:class:`~.fastslot.FastSlotSolver`)
:mod:`~.fallback`         the greedy feasible answer, and "solve, else greedy"
:mod:`~.blocklp`          the block LP over slots, jobs and configurations that the
                          look-ahead and the hindsight plan share: build, solve, read
========================  =================================================================
"""
