"""The package's import structure: nothing in verify/ imports a task or JAX, the loop, stages,
evaluation and warm start see tasks only through the protocol (tasks/base.py), and the jobs
are siblings: none imports another, and the run scaffold below them imports none."""

import ast
import pathlib
import subprocess
import sys

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "rlvr_jax"


def _imports(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_verify_never_imports_tasks():
    for path in (PKG / "verify").glob("*.py"):
        assert not any(m.startswith("rlvr_jax.tasks") for m in _imports(path)), path.name


def test_the_loop_sees_tasks_only_through_the_protocol():
    for name in ("loop.py", "stages.py", "evaluation.py", "warmstart.py", "train_step.py"):
        task_imports = {m for m in _imports(PKG / name) if m.startswith("rlvr_jax.tasks")}
        assert task_imports <= {"rlvr_jax.tasks.base", "rlvr_jax.tasks.base.Task",
                                "rlvr_jax.tasks.base.repeat_each",
                                "rlvr_jax.tasks.base.tool_contexts"}, (name, task_imports)


def _rlvr_modules(path: pathlib.Path) -> set[str]:
    """The rlvr_jax modules a file imports (`from rlvr_jax import a, b` counts a and b)."""
    out = set()
    for m in _imports(path):
        parts = m.split(".")
        if parts[0] == "rlvr_jax" and len(parts) > 1:
            out.add(parts[1])
    return out


JOBS = {"loop", "preference_runs"}


def test_jobs_are_siblings_over_one_scaffold():
    for job in JOBS:
        assert not (_rlvr_modules(PKG / f"{job}.py") & (JOBS - {job})), job
    for below in ("run_scaffold.py", "warmstart.py", "build.py", "stages.py",
                  "learned_reward.py"):
        assert not (_rlvr_modules(PKG / below) & (JOBS | {"jobs"})), below
    assert "warmstart" not in _rlvr_modules(PKG / "learned_reward.py")  # a cast, not a start


def test_the_verifier_side_never_imports_jax():
    for path in (PKG / "verify").glob("*.py"):
        assert not any(m == "jax" or m.startswith("jax.") for m in _imports(path)), path.name


def test_the_wheel_lists_every_subpackage():
    """pyproject.toml lists the packages (conf/ ships as rlvr_jax.conf): a new subpackage must
    be added there, or a non-editable install would lack it."""
    tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 parses TOML itself")
    listed = set(tomllib.loads((PKG.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {"rlvr_jax"} | {"rlvr_jax." + ".".join(p.parent.relative_to(PKG).parts)
                            for p in PKG.glob("**/__init__.py") if p.parent != PKG}
    assert found | {"rlvr_jax.conf"} == listed


def test_the_environment_side_never_imports_jax():
    """envs/ and sandbox/ are host code: text in, text out; envs reaches only the sandbox,
    the verifier side, types and config errors; the sandbox none of its plug-ins (graders,
    environments); importing all of them loads no JAX."""
    for path in [*(PKG / "envs").rglob("*.py"), *(PKG / "sandbox").glob("*.py")]:
        mods = _imports(path)
        assert not any(m == "jax" or m.startswith("jax.") for m in mods), path.name
        ours = {m for m in mods if m.startswith("rlvr_jax")}
        allowed = (("rlvr_jax.sandbox", "rlvr_jax.types") if path.parent.name == "sandbox" else
                   ("rlvr_jax.envs", "rlvr_jax.sandbox", "rlvr_jax.verify", "rlvr_jax.types",
                    "rlvr_jax.config.choices"))
        assert all(m.startswith(allowed) for m in ours), (path.name, ours)
    code = ("import sys, rlvr_jax.envs.session_env, rlvr_jax.envs.routed, rlvr_jax.envs.registry,"
            " rlvr_jax.sandbox.session, rlvr_jax.sandbox.pool; print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def test_models_and_samplers_see_tokens_only():
    for path in [PKG / "sampling.py", PKG / "turn_sampler.py", *(PKG / "models").glob("*.py")]:
        bad = {m for m in _imports(path) if m.startswith(
            ("rlvr_jax.tasks", "rlvr_jax.envs", "rlvr_jax.verify", "rlvr_jax.episodes"))}
        assert not bad, (path.name, bad)


def test_the_maths_see_masks_not_turns():
    for name in ("losses.py", "advantages.py"):
        bad = {m for m in _imports(PKG / name) if m.startswith(
            ("rlvr_jax.envs", "rlvr_jax.episodes", "rlvr_jax.turn_sampler", "rlvr_jax.generate"))}
        assert not bad, (name, bad)


def test_loading_an_export_names_what_it_needs():
    """Issue 38.14: transformers loads an export only with torch, which `pip install -e .`
    does not install: the docs say so where the export is, and the `hf` extra brings the CPU
    build the tests pin."""
    tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 parses TOML itself")
    extras = tomllib.loads((PKG.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["hf"] == ["torch==2.13.0"] and "torch==2.13.0" in extras["test"]
    conf = (PKG.parent / "conf" / "README.md").read_text()
    export_doc = (PKG / "export.py").read_text()
    assert "pip install -e '.[hf]'" in conf and "pip install -e '.[hf]'" in export_doc
