"""Dataset loaders: GSM8K / MATH / verl rows from JSONL and Parquet, bad rows named by
file:line or skipped."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr_jax.data import loaders

GSM = {"question": "Tom has 3 apples and gets 4. How many?", "answer": "3 + 4 = 7\n#### 7"}


MATH = {"problem": "Compute 1/2 + 1/4.", "solution": "It is $\\boxed{\\frac{3}{4}}$.",
        "type": "Algebra"}


VERL = {"data_source": "openai/gsm8k", "prompt": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "2+2?"}],
        "reward_model": {"style": "rule", "ground_truth": "4"}}


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_three_formats_from_jsonl_and_parquet(tmp_path):
    problems, skipped = loaders.load(_jsonl(tmp_path / "mix.jsonl", [GSM, MATH, VERL]))
    assert skipped == 0
    assert [p.answer for p in problems] == ["7", "\\frac{3}{4}", "4"]
    assert [p.data_source for p in problems] == ["mix", "Algebra", "openai/gsm8k"]
    assert problems[2].messages == (("system", "Be brief."), ("user", "2+2?"))
    assert problems[0].uid.endswith("mix.jsonl:1")
    pq.write_table(pa.Table.from_pylist([VERL, VERL]), tmp_path / "verl.parquet")
    parquet, _ = loaders.load(str(tmp_path / "verl.parquet"), fmt="verl")
    assert len(parquet) == 2 and parquet[1].uid.endswith("verl.parquet:2")


@pytest.mark.parametrize("bad,msg", [
    ("{not json", "not valid JSON"),
    (json.dumps({"question": "q", "answer": "no marker"}), "has no '#### <final answer>'"),
    (json.dumps({"problem": "p", "solution": "no box"}), "has no \\\\boxed"),
    (json.dumps({"data_source": "x", "prompt": [], "reward_model": {}}), "missing field"),
    (json.dumps({"text": "hello"}), "cannot tell the format"),
    (json.dumps([1, 2]), "expected a JSON object"),
])
def test_malformed_row_names_file_and_line_or_is_skipped(tmp_path, bad, msg):
    path = _jsonl(tmp_path / "d.jsonl", [GSM, bad, GSM])
    with pytest.raises(loaders.DatasetError, match=f"d.jsonl:2: .*{msg}"):
        loaders.load(path)
    problems, skipped = loaders.load(path, on_error="skip")
    assert len(problems) == 2 and skipped == 1  # the other rows are kept


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(loaders.DatasetError, match="nope.jsonl: file not found"):
        loaders.load(str(tmp_path / "nope.jsonl"))


def test_a_directory_is_named_not_a_traceback(tmp_path):
    """Issue 26: a data path that is a directory raised IsADirectoryError (34 lines); one
    without data files is one line."""
    (tmp_path / "train").mkdir()
    with pytest.raises(loaders.DatasetError, match="train: a directory without data files"):
        loaders.load(str(tmp_path / "train"))


def test_hugging_face_datasets_on_disk_load_like_a_jsonl_file(tmp_path):
    """Issue 38.15: what a user has after a download elsewhere, written here by `datasets`
    itself: a save_to_disk directory, a saved DatasetDict's split, a folder of one split's
    Parquet shards and a glob of them give the rows of the JSONL file, with the same format
    detection; several splits at once, or a DatasetDict's root, are one line naming them."""
    datasets = pytest.importorskip("datasets")
    rows = [dict(GSM, question=f"What is {i}+4?", answer=f"so #### {i + 4}") for i in range(40)]
    want = loaders.load(_jsonl(tmp_path / "plain.jsonl", rows))[0]
    table = datasets.Dataset.from_list(rows)
    table.save_to_disk(str(tmp_path / "saved"), num_shards=2)  # two Arrow files
    datasets.DatasetDict({"train": table, "test": table}).save_to_disk(str(tmp_path / "dd"))
    shards = tmp_path / "hub" / "main"
    shards.mkdir(parents=True)
    table.shard(2, 0, contiguous=True).to_parquet(str(shards / "train-00000-of-00002.parquet"))
    table.shard(2, 1, contiguous=True).to_parquet(str(shards / "train-00001-of-00002.parquet"))
    only_train = tmp_path / "train_only"
    only_train.mkdir()
    for f in shards.iterdir():
        (only_train / f.name).write_bytes(f.read_bytes())
    table.to_parquet(str(shards / "test-00000-of-00001.parquet"))
    key = lambda ps: [(p.messages, p.answer) for p in ps]
    for path in (tmp_path / "saved", tmp_path / "dd" / "train", only_train,
                 shards / "train-*.parquet"):
        got, skipped = loaders.load(str(path))
        assert key(got) == key(want) and skipped == 0, path
    with pytest.raises(loaders.DatasetError, match=r"dd: a saved DatasetDict with splits "
                                                   r"train, test: name one split's directory"):
        loaders.load(str(tmp_path / "dd"))
    with pytest.raises(loaders.DatasetError, match=r"main: holds the shards of several splits "
                                                   r"\(test, train\)"):
        loaders.load(str(shards))


def test_a_row_nested_past_the_parser_is_a_bad_row(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(loaders.DatasetError, match=r"deep.jsonl:1: JSON nested too deeply"):
        loaders.load(str(path))
