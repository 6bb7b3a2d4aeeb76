"""The trainer's own interpreter inside a sandbox, for graders that need its libraries
(reasoning-gym's scorers): what is bound, read-only, and where (`TrainerPython`), and, when
the trainer runs as root, the empty mount points its paths are bound onto in a private mount
namespace before bwrap starts as the unprivileged uid (`MOUNT_POINTS`; bwrap.py's module
docstring)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional

from rlvr_jax.sandbox.privilege import SandboxUnavailable, of_dead_processes

SITE_ROOT = "/opt/rlvr/site"  # where the trainer's site directories appear in the sandbox
_HIDDEN = ("/tmp", "/dev", "/proc")  # the sandbox's own mounts: nothing of the host's shows


@dataclass(frozen=True)
class TrainerPython:
    """The trainer's interpreter inside the sandbox, read-only, with modules the worker
    imports before its first job (`preload`).

    Only what the interpreter needs is bound, never its whole prefix: the interpreter binary,
    its shared libpython, its standard library (lib-dynload included), at their own paths; and
    the trainer's site directories, in the trainer's own `sys.path` order, at
    /opt/rlvr/site/<k>, which the worker adds itself (`--path`, with `site.addsitedir`, so
    .pth files work) after starting the interpreter with `-I -S`: no other install's
    site-packages can shadow the trainer's (a venv under /tmp, hidden by the sandbox's own
    /tmp, once made the worker import another reasoning-gym). A preloaded package living
    outside those directories (an editable install) is bound too. An interpreter or standard
    library under /tmp, /dev or /proc cannot be shown at its own path: refused, with the
    reason (`binds`)."""

    preload: tuple[str, ...] = ()

    @staticmethod
    def executable() -> str:
        return os.path.realpath(sys.executable)

    @staticmethod
    def site_dirs() -> list[str]:
        """The trainer's site directories, in its `sys.path` order, without repeats."""
        out: list[str] = []
        for p in sys.path:
            if p and os.path.basename(p) in ("site-packages", "dist-packages") \
                    and os.path.isdir(p) and os.path.realpath(p) not in out:
                out.append(os.path.realpath(p))
        return out

    def binds(self) -> list[tuple[str, str]]:
        """(host path, sandbox path) pairs, read-only; SandboxUnavailable, naming the path,
        when the interpreter itself sits where the sandbox has its own mounts."""
        import _struct
        import importlib.util
        import sysconfig

        own = [self.executable()]
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):
            lib = os.path.join(str(sysconfig.get_config_var("LIBDIR") or ""),
                               str(sysconfig.get_config_var("INSTSONAME") or ""))
            if os.path.isfile(lib):
                own.append(os.path.realpath(lib))
        # The standard library and its extension modules, from where this interpreter loaded
        # them (in a venv, sysconfig's platstdlib names the venv, not the base).
        stdlib = os.path.dirname(os.path.realpath(os.__file__))
        own.append(stdlib)
        dynload = os.path.dirname(os.path.realpath(getattr(_struct, "__file__", "") or stdlib))
        if not (dynload == stdlib or dynload.startswith(stdlib + os.sep)):
            own.append(dynload)
        for path in own:
            for hidden in _HIDDEN:
                if path == hidden or path.startswith(hidden + os.sep):
                    raise SandboxUnavailable(
                        f"the trainer's Python ({path}) lies under {hidden}, which the "
                        "sandbox replaces with its own mount, so a grader that needs "
                        "the trainer's libraries cannot run it: use an interpreter installed "
                        "elsewhere (a venv under /tmp is fine; its base interpreter is not)")
        sites = self.site_dirs()
        binds = [(p, p) for p in own]
        binds += [(p, f"{SITE_ROOT}/{k}") for k, p in enumerate(sites)]
        for k, name in enumerate(self.preload):
            spec = importlib.util.find_spec(name)
            where = (list(spec.submodule_search_locations or []) if spec else [])
            for path in map(os.path.realpath, where):
                if not any(path.startswith(d + os.sep) for d in sites):
                    binds.append((path, f"/opt/rlvr/pkg/{k}/{os.path.basename(path)}"))
        return binds

    def site_paths(self) -> list[str]:
        """The sandbox's paths the worker adds, in order: the site directories, then the
        folders holding preloaded packages bound on their own."""
        paths = [dest for _, dest in self.binds()
                 if dest.startswith(SITE_ROOT + "/") or dest.startswith("/opt/rlvr/pkg/")]
        return [p if p.startswith(SITE_ROOT) else os.path.dirname(p) for p in paths]


class _MountPoints:
    """Empty directories (or files) on the host, one per path the trainer's Python binds,
    which root's private mount namespace binds those paths onto before dropping to the
    sandbox's uid (see the module docstring). One folder per process under the temp dir,
    `rlvr-bind-<pid>-*`, held by the pools that use it (`hold` / `release`) and removed when
    the last lets go, at exit, or, for a process that was killed, by the next one to start."""

    def __init__(self):
        self.folder: Optional[str] = None
        self.points: dict[str, str] = {}
        self.holders = 0

    def get(self, path: str) -> str:
        if self.folder is None:
            _remove_stale_mount_points()
            self.folder = tempfile.mkdtemp(prefix=f"rlvr-bind-{os.getpid()}-")
            os.chmod(self.folder, 0o755)
        if path not in self.points:
            point = os.path.join(self.folder, str(len(self.points)))
            if os.path.isdir(path):
                os.mkdir(point, 0o755)
            else:
                open(point, "w").close()
                os.chmod(point, 0o644)
            self.points[path] = point
        return self.points[path]

    def hold(self) -> None:
        self.holders += 1

    def release(self) -> None:
        self.holders = max(self.holders - 1, 0)
        if self.holders == 0:
            self.remove()

    def remove(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder, self.points = None, {}


def _remove_stale_mount_points() -> None:
    """Remove the mount-point folders of processes that are gone (a killed trainer's)."""
    for path in of_dead_processes(tempfile.gettempdir(), "rlvr-bind-", "-"):
        shutil.rmtree(path, ignore_errors=True)


MOUNT_POINTS = _MountPoints()
atexit.register(MOUNT_POINTS.remove)
