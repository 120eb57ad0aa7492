"""Online estimation of a running job's speed and gradient noise scale.

Each slot the simulator reports what it observed for a job: the throughput it actually got
on ``n`` GPUs at global batch ``m`` and the gradient statistics of that slot (squared norm
of the mean gradient ``grad_sqr`` and gradient variance ``grad_var`` normalised to the
initial batch ``m0``, AdaptDL's convention). :class:`OnlineEstimator` keeps exponential
moving averages (EMA) with bias correction, as AdaptDL's ``GradientNoiseScale`` does::

    s_k   = (1 - a) * s_{k-1} + a * log(X_obs / X_model(n, m))     speed correction
    q_k   = (1 - a) * q_{k-1} + a * grad_sqr
    v_k   = (1 - a) * v_{k-1} + a * grad_var
    w_k   = (1 - a) * w_{k-1} + a                                  (bias correction)
    speed = exp(s_k / w_k),   phi = m0 * (v_k / w_k) / (q_k / w_k) = m0 * v_k / q_k

The speed correction multiplies the model's throughput (every time term of
:class:`~workbench.perf.ThroughputParams` is divided by it); before the first observation it
is 1 and ``phi`` is the profile's trajectory value at the job's progress.

:func:`planning_speed_factor` is the speed the simulator hands the policies: the estimate,
or, near the deadline of a job with a predicted and still unobserved profile, the slow end
of the prediction interval.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from workbench.perf import JobProfile, throughput

if TYPE_CHECKING:
    from workbench.model import Job

log = logging.getLogger(__name__)


@dataclass
class OnlineEstimator:
    """EMA estimator of one job's throughput correction and gradient noise scale.

    Parameters
    ----------
    profile : JobProfile
        Prior model of the job on its GPU type.
    alpha : float
        EMA weight of a new observation, in (0, 1]; about ``2 / alpha`` slots of memory.
    gpus_per_node : int
        Node size used to evaluate the prior throughput model.
    """

    profile: JobProfile
    alpha: float = 0.1
    gpus_per_node: int = 8
    _log_speed: float = field(default=0.0, init=False, repr=False)
    _speed_w: float = field(default=0.0, init=False, repr=False)
    _sqr: float = field(default=0.0, init=False, repr=False)
    _var: float = field(default=0.0, init=False, repr=False)
    _grad_w: float = field(default=0.0, init=False, repr=False)
    slots: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {self.alpha}")

    def update(
        self,
        n: int,
        m: float,
        observed_throughput_sps: float | None = None,
        grad_sqr: float | None = None,
        grad_var: float | None = None,
    ) -> None:
        """Fold in one slot's observations (any of them may be missing: None or NaN).

        ``observed_throughput_sps`` is samples/s on ``n`` GPUs at global batch ``m``;
        ``grad_sqr`` and ``grad_var`` the slot's gradient statistics (``grad_var`` at batch
        ``m0``). Non-positive or non-finite values are skipped with a debug log line.
        """
        a = self.alpha
        x = _finite_positive(observed_throughput_sps)
        if x is not None:
            model = float(throughput(self.profile.throughput, n, m, self.gpus_per_node))
            self._log_speed = (1 - a) * self._log_speed + a * math.log(x / model)
            self._speed_w = (1 - a) * self._speed_w + a
        q, v = _finite_positive(grad_sqr), _finite_positive(grad_var)
        if q is not None and v is not None:
            self._sqr = (1 - a) * self._sqr + a * q
            self._var = (1 - a) * self._var + a * v
            self._grad_w = (1 - a) * self._grad_w + a
        elif grad_sqr is not None or grad_var is not None:
            log.debug("skipping gradient statistics sqr=%r var=%r", grad_sqr, grad_var)
        self.slots += 1

    @property
    def speed_factor(self) -> float:
        """Observed over modelled throughput (EMA of the log ratio); 1 before any data."""
        if self._speed_w == 0.0:
            return 1.0
        return math.exp(self._log_speed / self._speed_w)

    def phi(self, progress: float = 0.0) -> float:
        """Current gradient-noise-scale estimate ``m0 * var / sqr``; the profile's
        trajectory at ``progress`` until gradient statistics have been seen."""
        if self._grad_w == 0.0:
            return float(self.profile.efficiency.phi(progress))
        return self.profile.efficiency.m0 * self._var / self._sqr

    def throughput(self, n: float, m: float) -> float:
        """Corrected throughput prediction, samples/s: ``speed_factor * X_model(n, m)``."""
        x = throughput(self.profile.throughput, n, m, self.gpus_per_node)
        return float(self.speed_factor * np.asarray(x))

    def corrected_profile(self) -> JobProfile:
        """The prior profile with every time term divided by :attr:`speed_factor`."""
        from dataclasses import replace

        f = self.speed_factor
        return replace(self.profile, throughput=self.profile.throughput.scaled(f, f, f))


def _finite_positive(v: float | None) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) and v > 0 else None


NEAR_DEADLINE_SLACK = 2.0
"""A deadline is *near* when the time left is at most this many times the run time the
remaining work needs at the job's requested configuration."""


def planning_speed_factor(est: OnlineEstimator, job: Job, remaining: float,
                          time_left_s: float | None) -> float:
    """Speed correction a policy should plan with: :attr:`OnlineEstimator.speed_factor`,
    except near the deadline of a job whose profile is *predicted* and not yet observed.

    Then the slow end of the profile's interval, ``1 / hi``, is assumed, so that a
    prediction that turns out optimistic does not cost the deadline. Near means
    ``time_left_s <= NEAR_DEADLINE_SLACK * remaining_run_s`` with ``remaining_run_s =
    remaining * W / ECU(n_req, m_req)`` at the current estimate. Once the job has run, the
    observed speed replaces the prediction (the estimator corrects it as before).
    """
    f = est.speed_factor
    iv = est.profile.step_time_interval
    if iv is None or est._speed_w > 0.0 or time_left_s is None or job.work_samples <= 0:
        return f
    from workbench.perf import ecu

    progress = 1.0 - remaining
    rate = f * float(ecu(est.profile, job.requested_gpus, job.batch_size, progress,
                         gpus_per_node=est.gpus_per_node, phi=est.phi(progress)))
    run_s = remaining * job.work_samples / rate if rate > 0 else math.inf
    if time_left_s <= NEAR_DEADLINE_SLACK * run_s:
        return f / iv[1]
    return f
