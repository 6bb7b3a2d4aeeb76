"""Where verification runs (issue 41): the trainer's own hosts (`local`, the default) or a
Ray cluster of CPU machines (`ray`, the `.[ray]` extra: rlvr_jax/sandbox/fleet.py)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr_jax.config.choices import _check, choice

Backend = choice("Backend", "local", "ray")


@dataclass
class FleetConfig:
    """The Ray cluster that runs sandbox pools as actors, each a bubblewrap pool as a local
    one (the same containment, verdicts and firewall), placed on machines that declare
    `resource` (e.g. `ray start --resources='{"sandbox": 4}'`)."""

    address: str = "auto"  # ray.init's: "auto" (RAY_ADDRESS or a local cluster) or host:port
    # The run's actors live in this namespace (empty: one made from the run's directory), so
    # a run finds and removes its own and no other run's.
    namespace: str = ""
    actors: int = 2  # sandbox pool actors (each with verifier.workers workers)
    resource: str = "sandbox"  # the custom resource an actor needs one unit of
    call_timeout_s: float = 600.0  # an actor's reply to one batch; past it: sandbox_error
    # A process's actors placed and started within this, or one error saying what the
    # cluster lacks (each process of a run makes its own `actors`, for verification and
    # for sessions: processes x actors units of `resource` each).
    start_timeout_s: float = 300.0
    # Sessions (env.backend=ray) of the run live at once on the fleet, each of its P trainer
    # processes admitting max_sessions // P; an open past it waits for room (its rows wait:
    # back-pressure). 0: each process actors x env.session.max_live
    max_sessions: int = 0
    opens_per_s: float = 0.0  # sessions opened per second at most, per process (0: no limit)

    def check(self, key: str = "fleet") -> None:
        _check(self.actors >= 1, f"{key}.actors", "must be >= 1")
        _check(self.call_timeout_s > 0, f"{key}.call_timeout_s", "must be > 0")
        _check(self.start_timeout_s > 0, f"{key}.start_timeout_s", "must be > 0")
        _check(bool(self.resource), f"{key}.resource", "must name a Ray resource")
        _check(self.max_sessions >= 0, f"{key}.max_sessions", "must be >= 0 (0: no cap)")
        _check(self.opens_per_s >= 0, f"{key}.opens_per_s", "must be >= 0 (0: no limit)")
