"""Source dispatch, system prompts and max_rows (hf_grpo/data/loading.py)."""

import json
import logging

import pytest
from datasets import Dataset, DatasetDict

from hf_grpo.data import DataFormatError, load_prompt_dataset, make_arithmetic_dataset

SYSTEM = {"role": "system", "content": "Be brief."}


def user(text):
    return {"role": "user", "content": text}


MATH_ROWS = [{"messages": user("1+1?"), "gt_answer": 2}, {"messages": [user("2+2?")], "gt_answer": "4"}]
MATH_CANON = [{"prompt": [user("1+1?")], "gt_answer": "2"}, {"prompt": [user("2+2?")], "gt_answer": "4"}]


def test_arithmetic_sources():
    ds = load_prompt_dataset("arithmetic")
    assert len(ds) == 2000 and ds.column_names == ["prompt", "gt_answer"]
    small = load_prompt_dataset("arithmetic:30", seed=3)
    assert small.to_list() == make_arithmetic_dataset(30, seed=3).to_list()
    assert small.to_list() != load_prompt_dataset("arithmetic:30", seed=4).to_list()
    with pytest.raises(ValueError, match="arithmetic:N"):
        load_prompt_dataset("arithmetic:ten")
    with pytest.raises(ValueError, match="positive int"):
        load_prompt_dataset("arithmetic:0")


def test_in_memory_dataset_renames_prompt_column():
    source = Dataset.from_dict({"question_text": ["a", "b"], "gt_answer": [1, 2]})
    ds = load_prompt_dataset(source, prompt_column="question_text")
    assert ds.to_list() == [{"prompt": "a", "gt_answer": "1"}, {"prompt": "b", "gt_answer": "2"}]


def test_dataset_dict_single_split_only():
    split = Dataset.from_list([{"prompt": "a"}])
    assert load_prompt_dataset(DatasetDict(train=split))["prompt"] == ["a"]
    with pytest.raises(DataFormatError, match="ambiguous"):
        load_prompt_dataset(DatasetDict(train=split, test=split))


def test_list_and_dict_sources():
    assert load_prompt_dataset(MATH_ROWS).to_list() == MATH_CANON
    cols = {"prompt": [[user("x")], [user("y")]], "id": [1, 2]}
    assert load_prompt_dataset(cols).to_list() == [{"prompt": [user("x")], "id": 1}, {"prompt": [user("y")], "id": 2}]
    with pytest.raises(DataFormatError, match="equal length"):
        load_prompt_dataset({"prompt": ["a", "b"], "id": [1]})
    with pytest.raises(DataFormatError, match="pass \\[row\\]"):
        load_prompt_dataset({"prompt": "a"})
    with pytest.raises(DataFormatError, match=r"dataset\[1\]: key .messages."):
        load_prompt_dataset([MATH_ROWS[0], {"messages": "hi", "gt_answer": "1"}])
    with pytest.raises(DataFormatError, match="no rows"):
        load_prompt_dataset([])


def test_dataset_source_errors_name_the_row():
    source = Dataset.from_list([{"prompt": "a"}, {"prompt": "b"}]).rename_column("prompt", "text")
    with pytest.raises(DataFormatError, match=r"dataset\[0\]: .*\['text'\]"):
        load_prompt_dataset(source)


def test_save_to_disk_json_and_parquet_files(tmp_path):
    Dataset.from_list(MATH_ROWS[1:] + [{"messages": [user("3+3?")], "gt_answer": "6"}]).save_to_disk(tmp_path / "saved")
    saved = load_prompt_dataset(tmp_path / "saved")
    assert saved.to_list() == [MATH_CANON[1], {"prompt": [user("3+3?")], "gt_answer": "6"}]

    json_path = tmp_path / "rows.json"
    json_path.write_text(json.dumps([{"question": "q?", "answer": "so\n#### 7"}]))
    assert load_prompt_dataset(str(json_path)).to_list() == [
        {"prompt": [user("q?")], "gt_answer": "7", "answer": "so\n#### 7"}
    ]

    parquet_path = tmp_path / "rows.parquet"
    Dataset.from_dict({"text": ["hello"], "gt_answer": ["1"]}).to_parquet(str(parquet_path))
    assert load_prompt_dataset(parquet_path, prompt_column="text").to_list() == [{"prompt": "hello", "gt_answer": "1"}]


def test_bad_paths_and_types(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_prompt_dataset(tmp_path / "missing.jsonl")
    (tmp_path / "rows.csv").write_text("prompt\na\n")
    with pytest.raises(DataFormatError, match="rows.csv: unsupported file type"):
        load_prompt_dataset(tmp_path / "rows.csv")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataFormatError, match="save_to_disk"):
        load_prompt_dataset(tmp_path / "folder")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataFormatError, match="bad.json"):
        load_prompt_dataset(tmp_path / "bad.json")
    with pytest.raises(DataFormatError, match="unsupported prompt source"):
        load_prompt_dataset(42)


def test_system_prompt_prepended_only_when_missing():
    rows = [{"prompt": [user("a")]}, {"prompt": [SYSTEM, user("b")]}]
    ds = load_prompt_dataset(rows, system_prompt="Answer in \\boxed{}.")
    assert ds[0]["prompt"] == [{"role": "system", "content": "Answer in \\boxed{}."}, user("a")]
    assert ds[1]["prompt"] == [SYSTEM, user("b")]
    assert rows[0]["prompt"] == [user("a")]  # caller's rows are not mutated


def test_system_prompt_rejects_string_prompts():
    with pytest.raises(DataFormatError, match="system prompts need chat prompts"):
        load_prompt_dataset([{"prompt": "plain text"}], system_prompt="sys")


def test_max_rows_keeps_first_rows_and_logs(caplog):
    with caplog.at_level(logging.INFO, logger="hf_grpo.data"):
        ds = load_prompt_dataset("arithmetic:50", max_rows=10)
    assert ds.to_list() == make_arithmetic_dataset(50).to_list()[:10]
    assert any("40 cut" in r.getMessage() for r in caplog.records)
    assert len(load_prompt_dataset(MATH_ROWS, max_rows=5)) == 2
    with pytest.raises(ValueError, match="max_rows"):
        load_prompt_dataset(MATH_ROWS, max_rows=0)


def test_columns_are_the_union_over_rows():
    ds = load_prompt_dataset([{"prompt": "a"}, {"prompt": "b", "extra": 1}])
    assert ds.to_list() == [{"prompt": "a", "extra": None}, {"prompt": "b", "extra": 1}]
