"""`--repo PATH` for this folder's scripts: run another checkout's rlvr_jax (a worktree of the
commit before a fix, for a before/after table), here and in the pool's worker processes. Run
the script from that checkout: workers started with `python -m` import the rlvr_jax of their
working directory first."""

from __future__ import annotations

import argparse
import os
import sys


def add_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--repo", default=None, help="run another checkout's rlvr_jax (baseline)")


def use(repo: str | None) -> None:
    """Import rlvr_jax from `repo` from now on (None: the installed one)."""
    if not repo:
        return
    for name in [m for m in sys.modules if m == "rlvr_jax" or m.startswith("rlvr_jax.")]:
        del sys.modules[name]
    sys.path.insert(0, os.path.abspath(repo))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.abspath(repo)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
