"""What the look-ahead notes each slot and when new jobs re-plan its window:
:class:`ReplanTracker`, with its record :class:`SlotNotes` (the jobs' moves and arrivals;
observations, which a coordinator undoing a re-plan never undoes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.policies.base import SlotState


@dataclass
class SlotNotes:
    """What the look-ahead has seen of the jobs: the training jobs seen so far and the slot
    of the latest first sighting (``last_arrival``), each job's datacenter at its last
    sighting and the slot of its latest move, the slot last observed and whether no new job
    arrived in the re-plan period before it (``quiet``)."""

    seen: set[str] = field(default_factory=set)
    last_arrival: int = -(10**9)
    where: dict[str, str] = field(default_factory=dict)
    moved_at: dict[str, int] = field(default_factory=dict)
    observed_t: int = -1
    quiet: bool = True


class ReplanTracker:
    """The look-ahead's slot bookkeeping and its re-plan rule for new jobs, with a
    re-plan period of ``replan_slots`` slots and the rule's ``arrival_replan_slots``
    (:class:`~workbench.policies.lookahead.LookaheadConfig`)."""

    def __init__(self, replan_slots: int, arrival_replan_slots: int | None) -> None:
        self.replan_slots = replan_slots
        self.arrival_replan_slots = arrival_replan_slots
        self.notes = SlotNotes()

    def observe(self, state: SlotState) -> bool:
        """Note the slot's jobs (moves, arrivals); whether this is the slot's first call
        (the caller then reads the slot's meter). ``notes.quiet``: whether no new job
        arrived in the ``replan_slots`` slots before this one, judged at the slot's first
        call (a coordinator may re-plan a slot more than once)."""
        notes = self.notes
        first = notes.observed_t != state.t
        if first:
            notes.observed_t = state.t
            notes.quiet = state.t - notes.last_arrival > self.replan_slots
        self._track_moves(state)
        self._track_arrivals(state)
        return first

    def replan_for_arrivals(self, t: int, plan_t0: int) -> bool:
        """Whether the new jobs of slot ``t`` re-plan the window (made at ``plan_t0``) now:
        with ``arrival_replan_slots`` K, once K slots have passed since the last plan; by
        default, when no new job arrived in the ``replan_slots`` slots before this one
        (``notes.quiet``)."""
        if self.arrival_replan_slots is not None:
            return t - plan_t0 >= self.arrival_replan_slots
        return self.notes.quiet

    def _track_arrivals(self, state: SlotState) -> None:
        """Note the training jobs first seen in this slot."""
        fresh = [js.job.job_id for js in state.jobs
                 if js.job.is_training and js.job.job_id not in self.notes.seen]
        if fresh:
            self.notes.seen.update(fresh)
            self.notes.last_arrival = state.t

    def _track_moves(self, state: SlotState) -> None:
        """Remember the slot of each job's latest move (its checkpoint changed place)."""
        where, moved_at = self.notes.where, self.notes.moved_at
        for js in state.jobs:
            jid = js.job.job_id
            d = js.last_datacenter
            if d is None:
                continue
            prev = where.get(jid)
            if prev is not None and prev != d:
                moved_at[jid] = state.t - 1
            where[jid] = d
