"""Server mode with a vision-language policy, against a real `vllm serve` on loopback (the tiny random Idefics3,
started with `hf-grpo serve`, which enables vLLM's scale-out routes): image prompts reach the server as unexpanded
ids plus PNG data URLs and come back with the ids it expanded; a training run's sampling log-probs match the
trainer's on image rows; every weight sync carries the vision tower and the projector, and a synced server does not
reuse image embeddings of the old vision tower; multi-turn rollouts whose tool returns an image are generated from
contexts holding every image. One server for the module: each test's trainer pushes its own weights to it first."""

import base64
import copy
import http.server
import io
import threading

import numpy as np
import pytest
import requests
import torch
from datasets import Dataset
from PIL import Image

from hf_grpo import DistributedGRPOTrainer, GRPOConfig
from hf_grpo.generation import SamplingParams
from hf_grpo.generation.vllm_server import MEDIA_ROUTE, VLLMServerClient, VLLMServerError, image_data_url
from hf_grpo.vision.inputs import PromptMedia, VisionPrompts
from tests.helpers.servers import Server, running
from tests.helpers.tool_images import IDEFICS3_CALL_REGEX, length_reward, policy, rows, screenshot
from tests.helpers.vlm_models import IMAGE_TOKENS

VISION_PARTS = ("model.vision_model.", "model.connector.")  # Idefics3's vision tower and projector
COLOURS = ("red", "blue")


@pytest.fixture(scope="module")
def idefics3(tmp_path_factory):
    """The tiny Idefics3 whose turns end on its family's end-of-turn token (`tests.helpers.tool_images.policy`): the
    tool test needs a tool-call turn to stop there; the other tests do not depend on which token ends a turn."""
    return policy("idefics3", tmp_path_factory.mktemp("vlm"))


@pytest.fixture(scope="module")
def server(idefics3, tmp_path_factory):
    with running(Server(idefics3, tmp_path_factory.mktemp("server-logs"))) as (s,):
        yield s


def image_rows() -> Dataset:
    # Two rows, both in every step's batch: step 2 sends the images of step 1 again, after a sync.
    images = [Image.new("RGB", (64, 64), c) for c in COLOURS]
    prompts = [[{"role": "user", "content": f"What colour is it? ({c})"}] for c in COLOURS]
    return Dataset.from_dict({"prompt": prompts, "image": images})


def completion_length(completions, image=None, **kwargs):
    assert image is not None and len(image) == len(completions)  # the image column reaches the reward
    return [float(len(c[0]["content"])) for c in completions]


@pytest.fixture(scope="module")
def trained(server, idefics3, tmp_path_factory):
    """Two steps at learning rate 0.1 (the vision tower moves a lot) with the server generating."""
    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("vlm-server")),
        generation_backend="vllm",
        vllm_mode="server",
        vllm_server_urls=[server.url],
        vllm_server_timeout=5,
        vllm_request_timeout=60,
        learning_rate=0.1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        disable_tqdm=True,
        plot_metrics=False,
        use_cpu=True,
    )
    trainer = DistributedGRPOTrainer(
        model=idefics3, reward_funcs=completion_length, args=args, train_dataset=image_rows()
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    yield trainer, before
    trainer.generator.close()


def prompt_and_media(trainer, colour: str):
    vision = VisionPrompts(trainer.processing_class)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour is it?"}]}]
    return vision.encode_one(messages, [Image.new("RGB", (64, 64), colour)])


def trainer_logprobs(model, ids, media, completion) -> torch.Tensor:
    x = torch.tensor([ids + completion])  # [1, P+C]
    with torch.no_grad():
        logits = model(input_ids=x, attention_mask=torch.ones_like(x), **media.tensors).logits[0].float()
    logp = logits[len(ids) - 1 : -1].log_softmax(-1)  # [C, V]
    return logp.gather(-1, torch.tensor(completion)[:, None])[:, 0]


def server_logprobs(server, media, completion) -> tuple[list[int], torch.Tensor]:
    """The server's expanded prompt ids and its log-probs of ``completion`` after the prompt with its image."""
    body = {
        "token_ids": media.engine_ids + completion,
        "content_parts": [{"type": "image_url", "url": image_data_url(im)} for im in media.images],
        "return_token_ids": True,
        "sampling_params": {"max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0},
    }
    answer = requests.post(server.url + MEDIA_ROUTE, json=body, timeout=60).json()
    ids = answer["prompt_token_ids"]
    start = len(ids) - len(completion)
    return ids[:start], torch.tensor(
        [answer["prompt_logprobs"][i][str(ids[i])]["logprob"] for i in range(start, len(ids))]
    )


@pytest.mark.slow
def test_training_on_image_rows_samples_with_the_trainers_weights(trained):
    trainer, before = trained
    logs = [r for r in trainer.state.log_history if "sampling/logp_difference/mean" in r]
    assert len(logs) == 2
    # Step 2 sampled after a sync of step 1's update (learning rate 0.1): the server held the trainer's weights.
    assert all(r["sampling/logp_difference/mean"] < 1e-4 for r in logs), logs
    moved = sorted(
        (p.detach() - before[n]).abs().max().item()
        for n, p in trainer.model.named_parameters()
        if n.startswith(VISION_PARTS)
    )
    # (Some tensors get next to no gradient, e.g. attention key biases, to which softmax is invariant.)
    assert moved[len(moved) // 2] > 0.05, "the vision tower hardly trained: the test would prove nothing"


@pytest.mark.slow
def test_sync_carries_the_vision_tower_and_drops_stale_image_embeddings(server, trained):
    """Only the vision tower and projector change: the server's log-probs of a fixed completion after an image follow
    them after a sync (same image as before the sync: its cached embedding must not be reused)."""
    trainer, _ = trained
    model = copy.deepcopy(trainer.model).eval()
    ids, media = prompt_and_media(trainer, "red")
    completion = [500, 600, 700, 800]
    trainer.generator.update_weights(model, version=10)
    expanded, synced = server_logprobs(server, media, completion)
    assert expanded == ids
    torch.testing.assert_close(synced, trainer_logprobs(model, ids, media, completion), atol=1e-4, rtol=0)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(VISION_PARTS):
                p.add_(torch.randn_like(p) * 0.5)
    expected = trainer_logprobs(model, ids, media, completion)
    assert (server_logprobs(server, media, completion)[1] - expected).abs().max() > 1e-2  # the change matters
    trainer.generator.update_weights(model, version=11)
    assert server.weight_version() == "11"
    torch.testing.assert_close(server_logprobs(server, media, completion)[1], expected, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_generate_checks_the_expanded_prompt_and_keeps_sampling_logprobs(server, trained):
    trainer, _ = trained
    ids, media = prompt_and_media(trainer, "blue")
    result = trainer.generator.generate([ids], 3, SamplingParams(max_tokens=5), media=[media])
    assert len(result.completion_ids) == 3
    assert all(len(lp) == len(c) > 0 for lp, c in zip(result.logprobs, result.completion_ids))
    # Ids that are not what the server expands (its last token dropped) are refused, naming the server.
    with pytest.raises(VLLMServerError, match=server.url + r", prompt 0: the server expanded its images into"):
        trainer.generator.generate([ids[:-1]], 1, SamplingParams(max_tokens=2), media=[media])


@pytest.mark.slow
def test_a_real_vllm_serve_expands_a_tool_image_into_the_trainers_context(server, idefics3, tmp_path):
    """tests/agents/test_vision_tools.py's colocated test against the real server: the server writes the call (the
    regex travels in the request), and its second turn is generated from a context holding both images, sent as
    unexpanded ids with PNG data URLs; the ids the server expanded are checked against the trainer's on every turn.
    (Sampling log-probs under a regex are the constrained distribution's, so they are not compared here: the tests
    above compare them on image rows.)"""
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        generation_backend="vllm",
        vllm_mode="server",
        vllm_server_urls=[server.url],
        vllm_server_timeout=5,
        vllm_request_timeout=120,
        use_cpu=True,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=160,  # a random model may spell the call in one token per character
        max_prompt_length=256,
        max_tool_calling_iterations=1,  # the second turn's call is not run: its rollout ends (max_turns)
        vllm_structured_outputs_regex=IDEFICS3_CALL_REGEX,
        learning_rate=0.1,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        plot_metrics=False,
        seed=0,
    )
    trainer = DistributedGRPOTrainer(idefics3, [length_reward], args, rows("idefics3", 1), tools=[screenshot])
    trainer.train()
    steps = [r for r in trainer.state.log_history if "tools/call_frequency" in r]
    assert len(steps) == 2, trainer.state.log_history
    for log in steps:  # step 2 samples from the synced server: the same images, a moved vision tower
        assert log["tools/call_frequency"] == 1.0 and log["rollout/termination/max_turns"] == 1.0, log
        assert log["rollout/observation_tokens_mean"] > IMAGE_TOKENS["idefics3"][1], log
    trainer.generator.close()


# ---- no server needed --------------------------------------------------------------------------------------------
def test_image_data_url_is_lossless():
    pixels = np.random.default_rng(0).integers(0, 256, (48, 40, 3), dtype=np.uint8)
    url = image_data_url(Image.fromarray(pixels))
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert (np.asarray(decoded) == pixels).all()


class _ScaleOutDisabled(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # what vLLM answers on its scale-out routes without --enable-scale-out
        self.send_response(403)
        self.end_headers()
        self.wfile.write(b'{"error": {"message": "Scale-out endpoints are disabled."}}')

    def log_message(self, *args):
        pass


def test_a_server_without_the_image_route_is_named_with_the_flag_to_start_it_with():
    stub = http.server.HTTPServer(("127.0.0.1", 0), _ScaleOutDisabled)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{stub.server_address[1]}"
        client = VLLMServerClient(url, request_timeout=5, health_timeout=2)
        media = PromptMedia(images=[Image.new("RGB", (8, 8))], engine_ids=[1, 2])
        with pytest.raises(VLLMServerError, match=url + r" does not serve /inference/v1/generate.*--enable-scale-out"):
            client.complete_media([[1, 2, 2]], [media], 1, SamplingParams(max_tokens=1))
    finally:
        stub.shutdown()
