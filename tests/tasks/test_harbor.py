"""Harbor-layout task directories (tasks/harbor.py): loaded, refused in one line when they
need what is not here (an image, containers, tests), and judged by their own tests/test.sh
in a fresh box after an episode in /app: a task's own solution passes, a wrong one fails,
and the tests are nowhere in the agent's session. Needs bubblewrap for the episodes."""

import pytest

from rlvr_jax.config import ConfigError
from rlvr_jax.tasks import harbor
from rlvr_jax.types import Status
from tests.helpers import UNAVAILABLE

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if python3 -c "import sys; sys.path.insert(0, '/app'); from add import add; \\
    assert add(2, 3) == 5 and add(-1, 1) == 0"; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


DAEMON = ("import os, time\\n"
          "if os.fork() == 0:\\n"
          "    os.setsid()\\n"
          "    end = time.time() + 5\\n"
          "    while time.time() < end:\\n"
          "        open(\\\"/logs/verifier/reward.txt\\\", \\\"w\\\").write(\\\"1\\\")\\n"
          "    os._exit(0)\\n"
          "raise SystemExit(1)\\n")


def _task(root, name, solve="sed -i 's/a - b/a + b/' add.py\n", **extra):
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Fix add() in /app/add.py.\n")
    (d / "task.toml").write_text('[verifier]\ntimeout_sec = 30.0\n')
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n"
                                                  "COPY add.py /app/add.py\n")
    (d / "environment" / "add.py").write_text("def add(a, b):\n    return a - b\n")
    (d / "tests" / "test.sh").write_text(TEST_SH)
    (d / "solution" / "solve.sh").write_text(solve)
    for path, text in extra.items():
        (d / path.replace("__", "/")).write_text(text)
    return d


def test_tasks_that_need_what_is_not_here_are_one_line(tmp_path):
    bad = _task(tmp_path, "needs-image")
    (bad / "environment" / "Dockerfile").write_text("FROM ubuntu\nRUN apt-get install -y gcc\n")
    with pytest.raises(ConfigError, match=r"Dockerfile:2: Harbor task 'needs-image' .* needs a "
                                          r"container image built \(RUN"):
        harbor.load_task(str(bad))
    pulled = _task(tmp_path, "pulled")
    (pulled / "task.toml").write_text('[environment]\ndocker_image = "org/img:1"\n')
    with pytest.raises(ConfigError, match=r"needs the container image 'org/img:1'"):
        harbor.load_task(str(pulled))
    untested = _task(tmp_path, "untested")
    (untested / "tests" / "test.sh").unlink()
    with pytest.raises(ConfigError, match=r"Harbor task 'untested' .*: no tests/test.sh"):
        harbor.load_task(str(untested))
    ok = harbor.load_task(str(_task(tmp_path, "fine")))
    assert dict(ok.files).keys() == {"add.py"} and ok.timeout_s == 30.0
    assert dict(ok.tests).keys() == {"test.sh"}


@pytest.mark.slow
@pytest.mark.xdist_group("sandbox")
@pytest.mark.skipif(bool(UNAVAILABLE), reason=f"no sandbox: {UNAVAILABLE}")
def test_each_task_is_judged_by_its_own_tests_which_the_session_never_sees(tmp_path, capsys):
    _task(tmp_path, "a-fix")
    _task(tmp_path, "b-wrong", solve="echo 'def add(a, b):\n    return 5' > add.py\n")
    _task(tmp_path, "c-snoop", solve="ls -a / /tests /logs > seen.txt 2>&1; grep -rl "
                                     "'verifier/reward' / --exclude-dir=proc --exclude-dir=sys "
                                     "--exclude-dir=usr >> seen.txt 2>&1; true\n")
    # the agent's module, imported by the tests, writes the reward and kills test.sh
    forge = ("printf 'import os\\nopen(\"/logs/verifier/reward.txt\", \"w\").write(\"1\")\\n"
             "os.kill(os.getppid(), 9)\\n' > add.py\n")
    _task(tmp_path, "d-forge", solve=forge)
    # ... or leaves a process that writes it after test.sh has written its 0
    _task(tmp_path, "e-daemon", solve="printf '" + DAEMON + "' > add.py\n")
    problems = harbor.load_dir(str(tmp_path))
    got = harbor.check_solutions(problems)
    assert [v.status for v in got] == [Status.PASS, Status.WRONG, Status.WRONG,
                                       Status.WRONG, Status.WRONG], got
    assert harbor.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "a-fix: PASS" in out and "b-wrong: WRONG" in out
    # The snooping solution's own view, read back through an episode of the environment.
    from rlvr_jax.envs import make_session_environment
    from rlvr_jax.sandbox.session import SessionLimits

    env = make_session_environment("harbor", "hermes", limits=SessionLimits(), spares=0)
    try:
        snoop = problems[2]
        ctx = harbor.HarborTask.tool_context(snoop)
        ctx["setup"]["files"].update({f".solution/{k}": v for k, v in snoop.solution})
        ep, = env.open([ctx])
        seen, = env.step([ep], [env.render_call("bash", {
            "command": "bash .solution/solve.sh; cat seen.txt"})])
        env.close_episodes([ep])
    finally:
        env.close()
    assert "No such file or directory" in seen.text and "test.sh" not in seen.text, seen.text


def test_a_harbor_run_needs_the_harbor_environment(tmp_path):
    from rlvr_jax.config import to_run_config

    _task(tmp_path, "a-fix")
    with pytest.raises(ConfigError, match=r"env.kind': task=harbor runs in env.kind=harbor"):
        to_run_config({"task": {"name": "harbor", "path": str(tmp_path)},
                       "model": {"path": "x"}})
