"""TRL's data contract for image rows (hf_grpo/data/images.py), through the loaders users call: each bad row is an
error naming the row and key, and the placement of image parts equals TRL's ``prepare_multimodal_messages``."""

import io
import json

import pytest
from datasets import Dataset
from PIL import Image
from trl.data_utils import prepare_multimodal_messages

from hf_grpo.data import DataFormatError, load_prompt_dataset
from hf_grpo.data.images import image_sizes, images_of, with_image_parts
from hf_grpo.data.schema import without_nulls


def user(content):
    return {"role": "user", "content": content}


def png(path, colour="red", size=(16, 8)):
    Image.new("RGB", size, colour).save(path)
    return path


def strip_payload(messages):
    """TRL's output with the image objects it puts in each part removed (we keep images in the row's column)."""
    return [
        {**m, "content": [{k: v for k, v in part.items() if k != "image"} for part in m["content"]]}
        if isinstance(m.get("content"), list)
        else m
        for m in messages
    ]


@pytest.mark.parametrize(
    "messages,n",
    [
        ([user("what colour?")], 1),
        ([user("compare")], 3),
        ([{"role": "system", "content": "be brief"}, user("what?")], 2),
        ([user("first"), {"role": "assistant", "content": "ok"}, user("second")], 1),
        ([user([{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}])], 1),
        ([user([{"type": "image"}]), {"role": "assistant", "content": "x"}, user([{"type": "image"}])], 2),
    ],
)
def test_image_parts_are_placed_as_trl_places_them(messages, n):
    images = [Image.new("RGB", (4, 4))] * n
    assert with_image_parts(messages, n) == strip_payload(prepare_multimodal_messages(messages, images))


def test_a_jsonl_row_resolves_paths_beside_the_file_and_rows_give_pil_images(tmp_path):
    (tmp_path / "img").mkdir()
    png(tmp_path / "img" / "a.png", "red", (16, 8))
    png(tmp_path / "img" / "b.png", "blue", (8, 8))
    data = tmp_path / "rows.jsonl"
    rows = [
        {"prompt": [user("colour?")], "image": "img/a.png", "answer": "red"},
        {"prompt": [user("colour?")], "image": str(tmp_path / "img" / "b.png"), "answer": "blue"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_prompt_dataset(str(data))
    assert without_nulls(ds[0]["prompt"]) == [user([{"type": "image"}, {"type": "text", "text": "colour?"}])]
    # Stored as datasets' Image feature: rows give PIL images, as TRL's reward functions receive them.
    assert isinstance(ds[0]["image"], Image.Image) and ds[0]["image"].getpixel((0, 0)) == (255, 0, 0)
    assert [im.getpixel((0, 0)) for im in images_of(ds[1])] == [(0, 0, 255)]
    assert image_sizes(ds[0]) == [(16, 8)]


def test_images_column_of_pil_images_and_bytes(tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (5, 7), "green").save(buffer, format="PNG")
    source = [
        {"prompt": [user("two?")], "images": [Image.new("RGB", (3, 3)), {"bytes": buffer.getvalue(), "path": None}]}
    ]
    ds = load_prompt_dataset(source)
    assert [part["type"] for part in ds[0]["prompt"][0]["content"]] == ["image", "image", "text"]
    assert ds[0]["images"][1].size == (5, 7)
    assert image_sizes(ds[0]) == [(3, 3), (5, 7)]


def test_an_empty_images_list_is_a_row_without_images():
    # TRL's multi-image datasets have such rows; their prompts may already be typed parts.
    typed = [user([{"type": "text", "text": "b"}])]
    ds = load_prompt_dataset(
        [{"prompt": [user("a")], "images": [Image.new("RGB", (4, 4))]}, {"prompt": typed, "images": []}]
    )
    assert images_of(ds[1]) == [] and image_sizes(ds[1]) == []
    assert without_nulls(ds[1]["prompt"]) == typed


def test_a_system_prompt_on_image_rows_is_typed_like_their_messages():
    ds = load_prompt_dataset([{"prompt": [user("a")], "image": Image.new("RGB", (4, 4))}], system_prompt="Be brief.")
    assert without_nulls(ds[0]["prompt"][0]) == {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}


def test_text_rows_may_sit_beside_image_rows():
    ds = load_prompt_dataset([{"prompt": [user("a")], "image": Image.new("RGB", (4, 4))}, {"prompt": [user("b")]}])
    # Typed like the image rows' (one Arrow type per column), as TRL's prepare_multimodal_messages types them.
    assert ds[1]["image"] is None and images_of(ds[1]) == []
    assert without_nulls(ds[1]["prompt"]) == [user([{"type": "text", "text": "b"}])]


@pytest.mark.parametrize(
    "row,message",
    [
        ({"prompt": [user("x")], "image": "missing.png"}, r"key 'image': image file '.*missing.png' does not exist"),
        ({"prompt": [user("x")], "image": "bad.png"}, r"key 'image': image file '.*bad.png' is not a readable image"),
        ({"prompt": [user("x")], "images": "ok.png"}, r"key 'images': expected a list of images, got str"),
        ({"prompt": [user("x")], "images": ["ok.png", 3]}, r"key 'images\[1\]': expected a PIL image, an image file"),
        ({"prompt": [user("x")], "image": "ok.png", "images": ["ok.png"]}, r"has both 'image' and 'images'"),
        ({"prompt": "x", "image": "ok.png"}, r"key 'prompt': a row with images needs a conversational prompt"),
        (
            {"prompt": [user([{"type": "image"}, {"type": "text", "text": "x"}])], "images": ["ok.png", "ok.png"]},
            r"key 'prompt': the prompt has 1 \{'type': 'image'\} part\(s\) but the row has 2 image\(s\)",
        ),
        (
            {"prompt": [user([{"type": "text", "text": "x"}])], "image": "ok.png"},
            r"key 'prompt': no user message has string content to place the 1 image\(s\) before",
        ),
        (
            {"prompt": [user([{"type": "image"}, {"type": "text", "text": "x"}])]},
            r"key 'prompt\[0\].content\[0\]': a 'image' content part; images go in the row's 'image' or 'images'",
        ),
        (
            {"prompt": [user([{"type": "video"}, {"type": "text", "text": "x"}])], "image": "ok.png"},
            r"key 'prompt\[0\].content\[0\]': a 'video' content part; only text and images are supported",
        ),
        (
            {"prompt": [user([{"type": "image"}, {"type": "txt", "text": "x"}])], "image": "ok.png"},
            r"key 'prompt\[0\].content\[1\]': expected \{'type': 'text', 'text': str\} or \{'type': 'image'\}",
        ),
    ],
)
def test_bad_image_rows_name_the_file_line_and_key(tmp_path, row, message):
    png(tmp_path / "ok.png")
    (tmp_path / "bad.png").write_text("not an image")
    data = tmp_path / "rows.jsonl"
    good = {"prompt": [user("fine")], "image": "ok.png"}
    data.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataFormatError, match=rf"rows.jsonl:2: {message}"):
        load_prompt_dataset(str(data))


def test_in_memory_rows_are_named_by_index(tmp_path):
    rows = [{"prompt": [user("a")], "image": Image.new("RGB", (4, 4))}, {"prompt": [user("b")], "image": "nope.png"}]
    with pytest.raises(DataFormatError, match=r"train_dataset\[1\]: key 'image': image file 'nope.png' does not"):
        load_prompt_dataset(Dataset.from_list(rows[:1]).to_list() + rows[1:], name="train_dataset")
