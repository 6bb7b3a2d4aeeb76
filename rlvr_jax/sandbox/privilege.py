"""Who runs a sandbox, and what a killed trainer left: the unprivileged uid bwrap starts as
when the trainer is root, and the names of our folders and cgroups whose process is gone."""

from __future__ import annotations

import os

class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces here; the message says how to fix it."""


NOBODY = 65534  # the sandbox's uid when the trainer runs as root (a root bwrap maps to root)


def drop_privileges() -> dict:
    """Popen arguments that start bwrap as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return {}
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def of_dead_processes(folder: str, prefix: str, sep: str) -> list[str]:
    """The entries of `folder` named `<prefix><pid><sep>...` whose process is gone from this
    pid namespace (ours are named so: mount-point folders, cgroups)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in names:
        pid = name[len(prefix):].split(sep)[0] if name.startswith(prefix) else ""
        if pid.isdigit() and sep in name[len(prefix):] and not alive(int(pid)):
            out.append(os.path.join(folder, name))
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
