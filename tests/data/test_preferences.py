"""Preference pairs: every format, Parquet, and bad rows named by file:line."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr_jax.data.loaders import DatasetError
from rlvr_jax.data.preferences import load

ROWS = [
    {"prompt": "2+2=", "chosen": "4", "rejected": "5"},
    {"chosen": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."}],
     "rejected": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Go away."}]},
    {"chosen": "\n\nHuman: What is 3*3?\n\nAssistant: 9.\n\nHuman: Sure?\n\nAssistant: Yes.",
     "rejected": "\n\nHuman: What is 3*3?\n\nAssistant: 9.\n\nHuman: Sure?\n\nAssistant: No."},
    {"prompt": [{"role": "user", "content": "Name a prime."}], "chosen": "7",
     "rejected": "8", "data_source": "primes"},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_every_format_in_jsonl_and_parquet(tmp_path):
    pairs, skipped = load(_jsonl(tmp_path / "p.jsonl", ROWS))
    assert skipped == 0 and len(pairs) == 4
    assert pairs[0].messages == (("user", "2+2="),) and (pairs[0].chosen, pairs[0].rejected) == (
        "4", "5")
    assert pairs[1].messages == (("system", "Be brief."), ("user", "Hi"))
    assert (pairs[1].chosen, pairs[1].rejected) == ("Hello.", "Go away.")
    assert pairs[2].messages == (("user", "What is 3*3?"), ("assistant", "9."), ("user", "Sure?"))
    assert (pairs[2].chosen, pairs[2].rejected) == ("Yes.", "No.")
    assert pairs[3].data_source == "primes" and pairs[0].data_source == "p"
    assert pairs[2].uid.endswith("p.jsonl:3")
    table = pa.Table.from_pylist([ROWS[0], {"prompt": "3+3=", "chosen": "6", "rejected": "7"}])
    pq.write_table(table, tmp_path / "p.parquet")
    parquet, _ = load(str(tmp_path / "p.parquet"))
    assert [p.chosen for p in parquet] == ["4", "6"] and parquet[1].uid.endswith("p.parquet:2")


@pytest.mark.parametrize("row,words", [
    ({"prompt": "x", "chosen": "a"}, "missing field 'rejected'"),
    ({"prompt": "x", "chosen": "a", "rejected": "a"}, "the same response"),
    ({"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
      "rejected": [{"role": "user", "content": "other"}, {"role": "assistant", "content": "b"}]},
     "do not share their prompt turns"),
    ({"chosen": [{"role": "user", "content": "q"}], "rejected": [{"role": "user", "content": "r"}]},
     "must end with an assistant message"),
    ({"text": "hello"}, "cannot tell the format"),
])
def test_a_bad_row_is_named_by_file_and_line_or_skipped(tmp_path, row, words):
    path = _jsonl(tmp_path / "bad.jsonl", [ROWS[0], row])
    with pytest.raises(DatasetError, match=f"bad.jsonl:2: .*{words}"):
        load(path)
    pairs, skipped = load(path, on_error="skip")
    assert len(pairs) == 1 and skipped == 1
