"""Several environments in one run (`env.kind=routed`, `env.routes=[python_repl, api]`): each
episode goes to the environment its row names (the context's "environment", e.g. a mixed
file's `environment` field), the first route by default. They share the call format, so the
sampler stops on every route's call markers; a call names only its own environment's tools
(another's is an unknown tool, an observation). Each route's episodes are opened, stepped,
finished and closed together, the routes one after another within a turn."""

from __future__ import annotations

from collections import defaultdict
from typing import Optional, Sequence

from rlvr_jax.envs.base import Episode, Reply


class RoutedEnvironment:
    def __init__(self, routes: dict):
        self.routes = dict(routes)  # name -> Environment (the first: the default)
        self.default = next(iter(self.routes))
        first = self.routes[self.default]
        self.observation_prefix = first.observation_prefix
        self.observation_suffix = first.observation_suffix
        self.tools = tuple(dict.fromkeys(t for e in self.routes.values() for t in e.tools))
        self.stop_texts = tuple(dict.fromkeys(s for e in self.routes.values()
                                              for s in e.stop_texts))

    def _route(self, context: dict) -> str:
        name = context.get("environment") or self.default
        if name not in self.routes:
            raise ValueError(f"a row names environment {name!r}, which this run does not "
                             f"route (env.routes: {', '.join(self.routes)})")
        return name

    def _by_route(self, episodes: Sequence[Episode]):
        groups = defaultdict(list)
        for i, e in enumerate(episodes):
            groups[e.route].append(i)
        return groups.items()

    def open(self, contexts: Sequence[dict]) -> list[Episode]:
        out: list = [None] * len(contexts)
        groups = defaultdict(list)
        for i, c in enumerate(contexts):
            groups[self._route(c)].append(i)
        try:
            for name, rows in groups.items():
                for i, e in zip(rows, self.routes[name].open([contexts[i] for i in rows])):
                    e.route, out[i] = name, e
        except BaseException:
            self.close_episodes([e for e in out if e is not None])
            raise
        return out

    def prepare(self, contexts: Sequence[dict]) -> None:
        groups = defaultdict(list)
        for c in contexts:
            groups[self._route(c)].append(c)
        for name, cs in groups.items():
            if hasattr(self.routes[name], "prepare"):
                self.routes[name].prepare(cs)

    def step(self, episodes: Sequence[Episode], turns: Sequence[str]) -> list[Reply]:
        out: list = [None] * len(episodes)
        for name, rows in self._by_route(episodes):
            replies = self.routes[name].step([episodes[i] for i in rows], [turns[i] for i in rows])
            for i, r in zip(rows, replies):
                out[i] = r
        return out

    def finish(self, episodes: Sequence[Episode], final_texts: Sequence[str]) -> list:
        out: list[Optional[object]] = [None] * len(episodes)
        for name, rows in self._by_route(episodes):
            got = self.routes[name].finish([episodes[i] for i in rows],
                                           [final_texts[i] for i in rows])
            for i, v in zip(rows, got):
                out[i] = v
        return out

    def close_episodes(self, episodes: Sequence[Episode]) -> None:
        failure = None
        for name, rows in self._by_route(episodes):
            try:
                self.routes[name].close_episodes([episodes[i] for i in rows])
            except BaseException as e:  # every route is closed, then the first error raised
                failure = failure or e
        if failure is not None:
            raise failure

    def stats(self) -> dict:
        return {f"{k.split('/', 1)[0]}/{name}/{k.split('/', 1)[1]}" if "/" in k else k: v
                for name, env in self.routes.items() for k, v in env.stats().items()}

    def render_call(self, tool: str, arguments: dict) -> str:
        for env in self.routes.values():
            if tool in env.tools:
                return env.render_call(tool, arguments)
        raise ValueError(f"no route has a tool {tool!r}")

    def close(self) -> None:
        for env in self.routes.values():
            env.close()
