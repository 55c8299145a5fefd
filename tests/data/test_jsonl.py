"""JSONL parsing, format detection and validation errors (hf_grpo/data/jsonl.py, schema.py)."""

import json
import logging

import pytest

from hf_grpo.data import DataFormatError, load_prompt_dataset
from hf_grpo.data.jsonl import read_jsonl

GSM8K_DEV = "/work/shared/data/gsm8k/dev.jsonl"


def write_jsonl(tmp_path, lines, name="data.jsonl"):
    """Write rows (dicts are JSON-encoded, strings written verbatim) one per line."""
    path = tmp_path / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines), encoding="utf-8")
    return path


def user(text):
    return {"role": "user", "content": text}


def load_error(path, **kwargs):
    with pytest.raises(DataFormatError) as info:
        load_prompt_dataset(path, **kwargs)
    return str(info.value)


# ---- the four formats ---------------------------------------------------------------------------------


def test_colossalchat_math_dict_and_list_messages(tmp_path):
    path = write_jsonl(
        tmp_path,
        [
            {"messages": user("What is 2+3?"), "gt_answer": 5},
            {"messages": [{"role": "system", "content": "Be brief."}, user("What is 1+1?")], "gt_answer": "2"},
        ],
    )
    ds = load_prompt_dataset(path)
    assert ds.column_names == ["prompt", "gt_answer"]
    assert ds.to_list() == [
        {"prompt": [user("What is 2+3?")], "gt_answer": "5"},
        {"prompt": [{"role": "system", "content": "Be brief."}, user("What is 1+1?")], "gt_answer": "2"},
    ]
    assert read_jsonl(path)[1] == "math"


def test_colossalchat_code_rows_keep_test_cases_and_extra_columns(tmp_path):
    cases = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}
    path = write_jsonl(tmp_path, [{"messages": user("Add two ints."), "test_cases": cases, "source": "x"}])
    rows = load_prompt_dataset(path).to_list()
    assert rows == [{"prompt": [user("Add two ints.")], "test_cases": cases, "source": "x"}]
    assert read_jsonl(path)[1] == "code"


def test_raw_gsm8k_rows(tmp_path):
    path = write_jsonl(
        tmp_path,
        [
            {"question": "How many?", "answer": "2 + 2 = 4\n#### 4"},
            {"question": "How much?", "answer": "Some #### in text\n1000+234=1234\n#### 1,234"},
        ],
    )
    rows = load_prompt_dataset(path).to_list()
    assert rows[0] == {"prompt": [user("How many?")], "gt_answer": "4", "answer": "2 + 2 = 4\n#### 4"}
    assert rows[1]["gt_answer"] == "1234"  # final '####', commas stripped
    assert "question" not in rows[1]


def test_real_gsm8k_dev_file():
    ds = load_prompt_dataset(GSM8K_DEV)
    assert len(ds) == 200
    first = ds[0]
    # Line 1: 400 vehicles, 200 Dodge, 100 Hyundai -> 400 - 200 - 100 = 100 Kia; the answer ends "#### 100".
    assert first["gt_answer"] == "100"
    assert first["prompt"][0]["role"] == "user"
    assert first["prompt"][0]["content"].startswith("Louie sells Dodge, Hyundai, and Kia vehicles")
    assert first["answer"].endswith("#### 100")
    assert all(g.lstrip("-").replace(".", "").isdigit() for g in ds["gt_answer"])


def test_generic_rows_string_and_chat_prompts(tmp_path):
    text = write_jsonl(tmp_path, [{"prompt": "Say hi.", "gt_answer": 3, "meta": {"k": 1}}], name="text.jsonl")
    assert load_prompt_dataset(text).to_list() == [{"prompt": "Say hi.", "gt_answer": "3", "meta": {"k": 1}}]
    chat = write_jsonl(tmp_path, [{"query": [user("hi")], "label": "a"}], name="chat.jsonl")
    assert load_prompt_dataset(chat, prompt_column="query").to_list() == [{"prompt": [user("hi")], "label": "a"}]


def test_blank_lines_are_skipped_and_logged(tmp_path, caplog):
    path = write_jsonl(tmp_path, ["", {"prompt": "a"}, "   ", {"prompt": "b"}, ""])
    with caplog.at_level(logging.DEBUG, logger="hf_grpo.data"):
        ds = load_prompt_dataset(path)
    assert ds["prompt"] == ["a", "b"]
    assert any("skipped 3 blank" in r.getMessage() for r in caplog.records)


# ---- errors -------------------------------------------------------------------------------------------


def test_malformed_json_reports_file_and_line(tmp_path):
    path = write_jsonl(tmp_path, [{"prompt": "ok"}, "", '{"prompt": "x",}'], name="bad.jsonl")
    msg = load_error(path)
    assert "bad.jsonl:3" in msg and "invalid JSON" in msg


def test_a_non_utf8_byte_is_reported_at_its_line_and_byte(tmp_path):
    first, bad = b'{"prompt": "a"}\r\n', b'{"prompt": "caf\xe9"}\r\n'  # Latin-1 e-acute on line 3
    data = b"\xef\xbb\xbf" + first + b"\r\n" + bad  # BOM, CRLF ends, a blank line 2
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(data)
    in_line, in_file = bad.index(b"\xe9") + 1, data.index(b"\xe9") + 1
    assert load_error(path) == (
        f"{path}:3: not UTF-8: byte 0xe9 at byte {in_line} of the line (byte {in_file} of "
        f"the file); save the file as UTF-8"
    )


def test_bom_and_every_line_end_are_read_as_in_text_mode(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\r{"prompt": "b"}\r\n\n{"prompt": "c"}\n{"prompt": "\xc3\xa9"}')
    assert load_prompt_dataset(path)["prompt"] == ["a", "b", "c", "\u00e9"]
    path.write_bytes('{"prompt": "a"}\n'.encode("utf-16"))
    assert load_error(path) == f"{path}:1: not UTF-8: the file starts with a UTF-16 byte-order mark; save it as UTF-8"


def test_non_object_line(tmp_path):
    msg = load_error(write_jsonl(tmp_path, [{"prompt": "ok"}, '["prompt"]']))
    assert "data.jsonl:2" in msg and "got list" in msg


def test_missing_keys_lists_keys_and_formats(tmp_path):
    path = write_jsonl(tmp_path, [{"messages": user("q"), "gt_answer": "1"}, {"messages": user("q")}])
    msg = load_error(path)
    assert "data.jsonl:2" in msg
    assert "['messages']" in msg and "gt_answer" in msg and "test_cases" in msg
    msg = load_error(write_jsonl(tmp_path, [{"text": "hi", "id": 1}], name="other.jsonl"))
    assert "other.jsonl:1" in msg and "['id', 'text']" in msg
    assert "GSM8K" in msg and "prompt_column='prompt'" in msg


@pytest.mark.parametrize(
    "row, key, detail",
    [
        ({"messages": 5, "gt_answer": "1"}, "'messages'", "got int"),
        ({"messages": [], "gt_answer": "1"}, "'messages'", "empty list"),
        ({"messages": [user("a"), {"role": "bot", "content": "b"}], "gt_answer": "1"}, "'messages[1].role'", "'bot'"),
        ({"messages": [{"role": "user", "content": ["a"]}], "gt_answer": "1"}, "'messages[0].content'", "got list"),
        ({"messages": [{"role": "user"}], "gt_answer": "1"}, "'messages[0].content'", "['role']"),
        ({"messages": user("a"), "gt_answer": [1]}, "'gt_answer'", "got list"),
        (
            {"messages": user("a"), "test_cases": {"inputs": ["1"], "outputs": ["1", "2"]}},
            "'test_cases'",
            "1 inputs and 2 outputs",
        ),
        (
            {"messages": user("a"), "test_cases": {"inputs": ["1"], "outputs": [1]}},
            "'test_cases.outputs[0]'",
            "got int",
        ),
        ({"messages": user("a"), "test_cases": {"inputs": ["1"]}}, "'test_cases.outputs'", "got null"),
        ({"messages": user("a"), "test_cases": ["1"]}, "'test_cases'", "got list"),
        ({"question": "q", "answer": "no marker"}, "'answer'", "####"),
        ({"question": "q", "answer": "#### many"}, "'answer'", "'many'"),
        ({"question": 3, "answer": "#### 1"}, "'question'", "got int"),
        ({"prompt": 7}, "'prompt'", "got int"),
    ],
)
def test_wrong_types_report_line_and_key(tmp_path, row, key, detail):
    msg = load_error(write_jsonl(tmp_path, ["", row]))  # the row is on line 2
    assert "data.jsonl:2: key " + key in msg
    assert "expected" in msg and detail in msg


def test_empty_and_blank_only_files_name_the_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "empty.jsonl" in load_error(empty)
    blank = write_jsonl(tmp_path, ["", "  "], name="blank.jsonl")
    msg = load_error(blank)
    assert "blank.jsonl" in msg and "no rows" in msg


def test_mixed_formats_fail_at_first_deviating_line(tmp_path):
    path = write_jsonl(
        tmp_path,
        [
            {"messages": user("a"), "gt_answer": "1"},
            {"messages": user("b"), "gt_answer": "2"},
            {"question": "c", "answer": "#### 3"},
        ],
    )
    msg = load_error(path)
    assert "data.jsonl:3" in msg and "'gsm8k'" in msg and "'math'" in msg


def test_mixed_prompt_kinds_and_column_types(tmp_path):
    msg = load_error(write_jsonl(tmp_path, [{"prompt": "a"}, {"prompt": [user("b")]}]))
    assert "data.jsonl:2: key 'prompt'" in msg and "string prompt" in msg
    msg = load_error(write_jsonl(tmp_path, [{"prompt": "a", "level": 1}, {"prompt": "b", "level": "hard"}], "t.jsonl"))
    assert "t.jsonl:2: key 'level'" in msg and "expected number" in msg and "got str" in msg


def test_prompt_column_collision(tmp_path):
    msg = load_error(write_jsonl(tmp_path, [{"q": "a", "prompt": "b"}]), prompt_column="q")
    assert "data.jsonl:1: key 'prompt'" in msg
