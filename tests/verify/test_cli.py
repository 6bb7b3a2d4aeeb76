"""`python -m rlvr_jax.verify`: scores a JSONL file; malformed lines are named and skipped."""

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.xdist_group("sandbox")  # one worker runs every sandbox test


def test_math_cli_scores_the_good_lines_and_names_the_bad(tmp_path):
    rows = ['{"id": 1, "completion": "so #### 12", "gold": "12"}',
            '{"id": 2, "completion": "\\\\boxed{\\\\frac{1}{2}}", "gold": "0.5"}',
            '{"id": 3, "completion": "13"',
            '{"id": 4, "completion": "13"}',
            '{"id": 5, "completion": "I give up", "gold": "7"}']
    src, dst = tmp_path / "jobs.jsonl", tmp_path / "verdicts.jsonl"
    src.write_text("\n".join(rows) + "\n")
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.verify", "--kind", "math",
                           "--input", str(src), "--output", str(dst)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "jobs.jsonl:3:" in proc.stderr and "jobs.jsonl:4: missing field(s) gold" in proc.stderr
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    # A malformed line keeps its own id where it has one (issue 38.10; line 3 is not JSON).
    assert [(r["id"], r["status"]) for r in out] == [(1, "pass"), (2, "pass"), (None, "malformed"),
                                                      (4, "malformed"), (5, "unparseable")]
    assert [r.get("line") for r in out if r["status"] == "malformed"] == [3, 4]


def test_code_cli_scores_the_rows_around_a_badly_shaped_one(tmp_path):
    """A row whose fields have the wrong types (`"inputs": [1, 2]`) is named and written as
    malformed; the valid rows around it are scored (in the sandbox)."""
    from tests.helpers import UNAVAILABLE

    if UNAVAILABLE:
        pytest.skip(f"no sandbox: {UNAVAILABLE}")
    good = {"completion": "def f(x):\n    return x + 1", "entry_point": "f",
            "inputs": [[1]], "expected": [2]}
    # typed rows: a tuple is no list (e), and a malformed encoding is the row's fault (f)
    typed = {"completion": "def f(x):\n    return x", "entry_point": "f", "typed": True,
             "inputs": [[{"tuple": [1, 2]}]], "expected": [{"tuple": [1, 2]}]}
    rows = [dict(good, id="a"), dict(good, id="b", inputs=[1, 2], expected=[2, 3]),
            dict(good, id="c", completion=7), dict(good, id="d", expected=[5]),
            dict(typed, id="e"), dict(typed, id="e2", expected=[[1, 2]]),
            dict(typed, id="f", expected=[{"tupel": [1, 2]}]),
            dict(good, id="g", tolerance=-1),  # math.isclose raised on it
            # whole programs on stdin: more digits of 1/3 pass, fewer fail
            *({"id": i, "completion": f"print({p})", "stdin": [""], "expected_stdout": [w]}
              for i, p, w in (("h", "1 / 3", "0.333333"), ("i", "0.33", "0.333333"))),
            {"id": "j", "completion": "", "stdin": ["1", "2"], "expected_stdout": ["1"]}]
    src, dst = tmp_path / "jobs.jsonl", tmp_path / "verdicts.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.verify", "--kind", "code",
                           "--input", str(src), "--output", str(dst)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "jobs.jsonl:2: field 'inputs' must be a list of argument lists" in proc.stderr
    assert "jobs.jsonl:3: field 'completion' must be a string" in proc.stderr
    assert "jobs.jsonl:7: field 'expected' is no typed value" in proc.stderr
    assert "jobs.jsonl:8: field 'tolerance' must be a number >= 0" in proc.stderr
    assert "jobs.jsonl:11: 'stdin' and 'expected_stdout' differ in length" in proc.stderr
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [(r["id"], r["status"]) for r in out] == [
        ("a", "pass"), ("b", "malformed"), ("c", "malformed"), ("d", "wrong"), ("e", "pass"),
        ("e2", "wrong"), ("f", "malformed"), ("g", "malformed"), ("h", "pass"), ("i", "wrong"),
        ("j", "malformed")]


@pytest.mark.parametrize("args,message", [
    (["--workers", "0"], "--workers: must be > 0"),
    (["--timeout", "0"], "--timeout: must be > 0"),
])
def test_bad_arguments_are_one_clear_line(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.verify", "--kind", "math", "--input",
                           str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "o"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_a_missing_input_file_is_named(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.verify", "--kind", "math", "--input",
                           str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "none.jsonl: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.verify", "--kind", "math", "--input",
                           str(tmp_path), "--output", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: --input {tmp_path}: a directory, not a JSONL file (one job a line)")


def test_an_output_in_a_missing_folder_is_named(tmp_path):
    """Issue 26: an output path in a folder that does not exist ended in a traceback."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "completion": "4", "gold": "4"}\n')
    proc = subprocess.run([sys.executable, "-m", "rlvr_jax.verify", "--kind", "math", "--input",
                           str(src), "--output", str(tmp_path / "no" / "out.jsonl")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: --output {tmp_path / 'no' / 'out.jsonl'}: no folder " \
                                  f"{tmp_path / 'no'}"
