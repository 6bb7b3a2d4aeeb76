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
