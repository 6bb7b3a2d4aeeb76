"""An environment whose every call takes a drawn time: any environment wrapped, its replies
delayed by a lognormal latency (median and 99th percentile in seconds), so the rollout
benchmarks (experiments/bench/streaming.py) and a training run can be measured against
long-tailed calls without a slow service. A benchmark's instrument, never an option of a
production environment:

    env.wrap=experiments.bench.env_latency:lognormal   (median 0.2 s, p99 5 s; from the
                                                        repository's root)

A call's latency is a function of the seed, its episode's context and its text, never of
timing or order: the same call waits the same time in every run and every driver. With a
limit (`limit_s`, as a real tool has one: a session's `call_s`), a call drawn longer waits
the limit and ends as a timeout (TOOL_ERROR), decided by its draw. The sleeps
of different episodes overlap (`concurrent_episodes`); the wrapped environment itself is
entered by one thread at a time.
"""

from __future__ import annotations

import math
import threading
import time
import zlib

import numpy as np

from rlvr_jax.envs.base import TOOL_ERROR, Reply

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class Delayed:
    concurrent_episodes = True

    def __init__(self, env, median_s: float, p99_s: float, seed: int = 0,
                 limit_s: float = math.inf):
        self.env, self.seed, self.limit_s = env, seed, limit_s
        self.mu = math.log(median_s) if median_s > 0 else -math.inf
        self.sigma = math.log(p99_s / median_s) / Z99 if median_s > 0 else 0.0
        self._lock = threading.Lock()
        self.slept_s: list[float] = []

    def __getattr__(self, name):  # tools, stop_texts, glue, render_call, stats, close
        return getattr(self.env, name)

    def latency(self, context: dict, turn: str) -> float:
        if self.mu == -math.inf:
            return 0.0
        rng = np.random.default_rng([self.seed, zlib.crc32(repr(sorted(context.items()))
                                                           .encode()),
                                     zlib.crc32(turn.encode())])
        return float(math.exp(self.mu + self.sigma * rng.standard_normal()))

    def step(self, episodes, turns):
        drawn = [self.latency(e.context, t) for e, t in zip(episodes, turns)]
        wait = min(max(drawn, default=0.0), self.limit_s)
        time.sleep(wait)
        self.slept_s.append(wait)
        with self._lock:
            replies = self.env.step(episodes, turns)
        # A call past the environment's own limit ends there, as the sandbox's timeout ends
        # it (rlvr_jax/envs/session_env.py): its outcome, decided by the draw, not the clock.
        return [Reply(f"error: the call timed out after {self.limit_s:g} s", TOOL_ERROR,
                      r.tool) if d > self.limit_s else r for r, d in zip(replies, drawn)]

    def open(self, contexts):
        with self._lock:
            return self.env.open(contexts)

    def finish(self, episodes, final_texts):
        with self._lock:
            return self.env.finish(episodes, final_texts)

    def close_episodes(self, episodes):
        with self._lock:
            return self.env.close_episodes(episodes)


def lognormal(env, e=None, median_s: float = 0.2, p99_s: float = 5.0):
    """`env.wrap` entry: every call delayed by lognormal(median 0.2 s, p99 5 s)."""
    return Delayed(env, median_s, p99_s)


def quick(env, e=None):
    """`env.wrap` entry for tests: median 5 ms, p99 50 ms."""
    return Delayed(env, 0.005, 0.05)
