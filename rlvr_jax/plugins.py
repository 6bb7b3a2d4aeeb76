"""How a table of plug-ins (tasks, objectives) finds its entries: every module of its own
package, then every module an entry point group of installed packages names; each registers
itself when imported."""

from __future__ import annotations

import importlib
import pkgutil
from importlib import metadata


def import_all(package, group: str, skip: tuple[str, ...] = ()) -> None:
    """Import `package`'s modules (but `skip`) and the modules of entry point `group`."""
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in skip:
            importlib.import_module(f"{package.__name__}.{info.name}")
    for entry in metadata.entry_points(group=group):
        importlib.import_module(entry.value.split(":")[0])


class Table:
    """One table of plug-ins by name (`what`: "task", "objective"): entries add themselves at
    their module's import (`add`); the first read imports `package`'s modules and those of
    entry point `group` (`import_all`). A second entry of one name from another module is an
    error; an unknown name, a ConfigError naming the config key and the known names."""

    def __init__(self, what: str, package: str, group: str, skip: tuple[str, ...] = ()):
        self.what, self.package, self.group, self.skip = what, package, group, skip
        self._entries: dict = {}  # name -> (entry, the module that added it)
        self._discovered = False

    def add(self, name: str, entry, origin: str):
        old = self._entries.get(name)
        if old is not None and old[1] != origin:
            raise ValueError(f"{self.what} {name!r} is registered twice ({old[1]}, {origin})")
        self._entries[name] = (entry, origin)
        return entry

    def all(self) -> dict:
        if not self._discovered:
            self._discovered = True
            import_all(importlib.import_module(self.package), self.group, self.skip)
        return {name: entry for name, (entry, _) in self._entries.items()}

    def get(self, name: str, key: str):
        from rlvr_jax.config.choices import ConfigError

        known = self.all()
        if name not in known:
            raise ConfigError(f"config key '{key}': unknown {self.what} '{name}' (known: "
                              f"{', '.join(sorted(known))})")
        return known[name]
