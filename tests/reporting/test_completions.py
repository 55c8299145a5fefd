"""TRL's log_completions outputs: the parquet file per logged step (what log_completions_hub_repo pushes) and the
W&B table, from a real short training with W&B in offline mode (its files read back from disk)."""

import glob
import json
import math
import os

import pandas as pd
import pytest

from hf_grpo.reporting.completions import completions_frame, write_parquet
from tests.helpers.trainers import make_trainer


def records(n=4):
    return [
        {
            "prompt": [{"role": "user", "content": f"q{i // 2}"}],
            "completion": [{"role": "assistant", "content": f"a{i}"}],
            "rewards": {"r": float(i), "other": None if i % 2 else 1.0},
            "advantage": 0.25 * i,
            "reward": 0.0,
            "finished": True,
            "reward_details": None,
        }
        for i in range(n)
    ]


def test_completions_frame_has_trls_columns_and_keeps_every_row():
    frame = completions_frame(records(), step=7)
    assert list(frame.columns) == ["step", "prompt", "completion", "r", "other", "advantage"]
    assert frame["step"].tolist() == [7] * 4 and frame["r"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert frame["other"].tolist()[0] == 1.0 and math.isnan(frame["other"].tolist()[1])  # None -> NaN (TRL)
    assert frame["advantage"].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert frame["completion"][3] == [{"role": "assistant", "content": "a3"}]  # messages stay messages
    assert completions_frame([], step=1).empty


def test_parquet_round_trip_keeps_conversations(tmp_path):
    path = tmp_path / "completions_00007.parquet"
    completions_frame(records(), step=7).to_parquet(path)
    back = pd.read_parquet(path)
    assert [list(m) for m in back["prompt"]][2] == [{"role": "user", "content": "q1"}]
    assert back["r"].tolist() == [0.0, 1.0, 2.0, 3.0]


def text(value) -> str:
    """A completion's text: a plain string, or the last message's content (parquet gives arrays, JSON lists)."""
    return value if isinstance(value, str) else list(value)[-1]["content"]


def test_messages_arrow_cannot_unify_are_kept_as_json_text(tmp_path):
    rows = records(2)
    rows[1]["prompt"] = [{"role": "user", "content": [{"type": "text", "text": "q0"}]}]  # parts, not a string
    path = tmp_path / "completions_00001.parquet"
    write_parquet(completions_frame(rows, step=1), path)
    back = pd.read_parquet(path)
    assert [json.loads(p) for p in back["prompt"]] == [r["prompt"] for r in rows]
    assert [json.loads(c) for c in back["completion"]] == [r["completion"] for r in rows]
    assert back["r"].tolist() == [0.0, 1.0]


@pytest.mark.slow
def test_training_writes_parquet_per_step_and_a_wandb_table(tiny_llama_path, tmp_path, wandb_offline):
    wandb = wandb_offline
    trainer = make_trainer(
        tiny_llama_path, tmp_path, max_steps=2, log_completions=True, log_unique_prompts=True, report_to="wandb"
    )
    try:
        trainer.train()
    finally:
        wandb.finish()
    # Every completion of each logged step, locally (the files log_completions_hub_repo pushes).
    per_step = trainer.args.per_device_train_batch_size
    for step in (1, 2):
        frame = pd.read_parquet(tmp_path / "out" / "completions" / f"completions_{step:05d}.parquet")
        assert list(frame.columns) == ["step", "prompt", "completion", "even_token_reward", "advantage"]
        assert len(frame) == per_step and set(frame["step"]) == {step}
        assert frame["even_token_reward"].notna().all()
        # Group-relative advantages: they sum to zero over each prompt's completions.
        sums = frame.groupby(frame["prompt"].astype(str))["advantage"].sum()
        assert len(sums) == per_step // trainer.args.num_generations and (sums.abs() < 1e-5).all()
    # The W&B table as the offline run stored it: TRL's columns, one row per prompt (log_unique_prompts).
    tables = sorted(
        glob.glob(
            os.path.join(tmp_path, "wandb", "offline-run-*", "files", "media", "table", "completions_*.table.json")
        )
    )
    assert len(tables) == 2
    first = json.loads(open(tables[0]).read())
    assert first["columns"] == ["step", "prompt", "completion", "even_token_reward", "advantage"]
    step1 = pd.read_parquet(tmp_path / "out" / "completions" / "completions_00001.parquet")
    prompts = step1["prompt"].astype(str).drop_duplicates()
    assert len(first["data"]) == len(prompts) == per_step // trainer.args.num_generations
    # Row by row: each prompt's first completion, with its reward and advantage.
    expected = step1.loc[prompts.index]
    assert [(text(row[2]), row[3], row[4]) for row in first["data"]] == [
        (text(c), r, a) for c, r, a in zip(expected["completion"], expected["even_token_reward"], expected["advantage"])
    ]


def test_the_wandb_table_shows_each_rows_prompt_images_with_log_multimodal(tmp_path, wandb_offline, monkeypatch):
    from PIL import Image

    from hf_grpo import GRPOConfig
    from hf_grpo.reporting.callbacks import write_rollout_log
    from hf_grpo.reporting.completions import CompletionsLog

    wandb = wandb_offline
    # A table with media is logged as a run_table artifact; offline, its files stay in the staging folder.
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    red, blue = Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 255))
    rows = [{**r, "images": images} for r, images in zip(records(), ([red], [red], [blue, red], []))]
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), log_completions=True, logging_steps=1, report_to="wandb", use_cpu=True
    )
    log = CompletionsLog(args, is_main=True)
    assert log.wants_images
    wandb.init()
    log.add(rows, step=1)
    wandb.finish()
    staged = [json.loads(p.read_text()) for p in (tmp_path / "wandb-data").rglob("tmp*") if p.read_bytes()[:1] == b"{"]
    (table,) = {json.dumps(t, sort_keys=True): t for t in staged if t.get("_type") == "table"}.values()  # copies
    assert table["columns"][-1] == "image"
    # One cell per row, a list of as many W&B images as the row's prompt had (none for the text row), each a file.
    assert [len(row[-1]) for row in table["data"]] == [1, 1, 2, 0]
    cells = [image for row in table["data"] for image in row[-1]]
    assert {image["_type"] for image in cells} == {"image-file"} and len({image["sha256"] for image in cells}) == 2
    # The parquet file and the rollout log stay text (TRL's parquet has no images either).
    frame = pd.read_parquet(tmp_path / "out" / "completions" / "completions_00001.parquet")
    assert "image" not in frame.columns and "images" not in frame.columns
    write_rollout_log(str(tmp_path / "out"), 1, rows, is_main=True)
    lines = open(tmp_path / "out" / "rollouts" / "step_000001.jsonl").read().splitlines()
    assert len(lines) == 4 and all("images" not in json.loads(line) for line in lines)
    # log_multimodal=False (TRL's switch): no images are gathered for the table.
    args.log_multimodal = False
    assert not CompletionsLog(args, is_main=True).wants_images
