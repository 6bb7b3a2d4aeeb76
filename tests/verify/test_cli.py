"""`python -m rlvr_jax.verify`: scores a JSONL file; malformed lines are named and skipped."""

import json
import subprocess
import sys

from tests.helpers import ROOT


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
    assert [(r["id"], r["status"]) for r in out] == [(1, "pass"), (2, "pass"), (None, "malformed"),
                                                      (None, "malformed"), (5, "unparseable")]
    assert [r.get("line") for r in out if r["status"] == "malformed"] == [3, 4]
