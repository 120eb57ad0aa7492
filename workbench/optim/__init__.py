"""The optimisation layer: every model the policies solve, built from arrays, solved by HiGHS
(the slot MILP also by any solver Pyomo drives).

It sits below the policies (which decide) and above the job model (which predicts): it
imports neither a policy nor the simulator. One module per concept:

========================  =================================================================
:mod:`~.info`             :class:`~.info.SolveInfo`, how one solve went (status, time, gap)
:mod:`~.highs`            the one HiGHS adapter: a quiet ``Highs``, a sparse model in named
                          blocks (:class:`~.highs.SparseLp`), solve and read back
:mod:`~.slot`             the per-slot assignment MILP: its data (:class:`~.slot.SlotProblem`),
                          its maths and the slot-solver names (no HiGHS, no Pyomo)
:mod:`~.slotpyomo`        the same MILP as a Pyomo model, for any solver Pyomo drives:
                          create, solve, extract
:mod:`~.slotarrays`       the same MILP as HiGHS arrays, its LP bound and the LP repair
:mod:`~.fastslot`         the fast path that solves successive slots
                          (:class:`~.fastslot.FastSlotSolver`)
:mod:`~.fallback`         the greedy feasible answer, and "solve, else greedy"
:mod:`~.blocklp`          the block LP over slots, jobs and configurations that the
                          look-ahead and the hindsight plan share: build, solve, read
========================  =================================================================
"""
