"""Environments by name, for `env.kind` and for a data row's `environment`:

  none, tools               one turn; the stateless built-in tools (envs/tool_env.py)
  routed                    each row's own environment among `env.routes` (envs/routed.py)
  python_repl, workspace, api, ...
                            stateful environment modules (envs/world.py): those of
                            rlvr_jax/envs/worlds/ (a new file there is found) and those named
                            by an `rlvr_jax.envs` entry point of an installed package:
                                [project.entry-points."rlvr_jax.envs"]
                                my_env = "my_package.my_env"
                            A module is read, never imported: it runs only in its sessions.
  package.module:factory    a host-side environment (e.g. an experiment's control wrapping
                            another), `factory(env_config) -> Environment`, imported when built

`check_kind` validates a name (one line naming the key); `build` makes the environment.
"""

from __future__ import annotations

import importlib
import os
from importlib import metadata

from rlvr_jax.config.choices import ConfigError
from rlvr_jax.envs import checked, world as world_module

BUILTIN = ("none", "tools", "routed")
_WORLDS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worlds")
_cache: dict = {}


def worlds() -> dict[str, str]:
    """Stateful environment name -> its module's path."""
    if "paths" not in _cache:
        paths = {name[:-3]: os.path.join(_WORLDS_DIR, name)
                 for name in sorted(os.listdir(_WORLDS_DIR))
                 if name.endswith(".py") and not name.startswith("_")}
        for entry in metadata.entry_points(group="rlvr_jax.envs"):
            paths[entry.name] = ("entry:" + entry.value)
        _cache["paths"] = paths
    return dict(_cache["paths"])


def world(name: str, key: str = "env.kind") -> world_module.World:
    """The stateful environment `name`, read and checked (cached)."""
    known = worlds()
    if name not in known:
        raise ConfigError(f"config key '{key}': unknown environment '{name}' (known: "
                          f"{', '.join(list(BUILTIN) + sorted(known))}, or "
                          "package.module:factory)")
    if ("world", name) not in _cache:
        path = known[name]
        if path.startswith("entry:"):
            path = world_module.module_path(path[len("entry:"):])
        _cache[("world", name)] = world_module.read(name, path)
    return _cache[("world", name)]


def check_kind(kind: str, key: str = "env.kind") -> None:
    if kind in BUILTIN:
        return
    if ":" in kind:
        module, _, attr = kind.partition(":")
        if not module or not attr.isidentifier():
            raise ConfigError(f"config key '{key}': '{kind}' is not package.module:factory")
        return
    world(kind, key)


def factory(kind: str, key: str = "env.kind"):
    """The host-side factory named `package.module:factory`; what it makes is held to the
    lifecycle's contract (envs/checked.py)."""
    module, _, attr = kind.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise ConfigError(f"config key '{key}': module {module!r} cannot be imported "
                          f"({type(e).__name__}: {e})") from None
    except AttributeError:
        raise ConfigError(f"config key '{key}': module {module!r} has no {attr!r}") from None
    return lambda *args: checked.Checked(fn(*args), key, kind)
