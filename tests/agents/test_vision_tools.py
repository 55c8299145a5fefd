"""Tools that return images (TRL's multimodal tool responses) and image prompts in multi-turn rollouts, with a
vision-language policy (hf_grpo/agents/media.py).

A tiny random VLM never writes a tool call, so the policy is scripted (tests/helpers/scripted_agent.py) where a test
needs a given pattern of calls; on colocated vLLM a regex constraint makes the engine itself write the call (the same
against a real `vllm serve`: tests/generation/test_vllm_server_vlm.py). The tool, the rows and the policies are
tests/helpers/tool_images.py's: the tool returns ``[{"type": "image", "image": <PIL>}, {"type": "text", "text": ...}]``,
as in TRL's ``test_train_with_tools_multimodal_response``.

The property the trainer relies on: a rollout's row (prompt, sampled turns, observations with the tool image expanded)
is exactly what the family's processor gives for the whole conversation, and the micro-batch the trainer collates
from the rollouts' media scores every completion token as one forward over that processor output does.
"""

import http.server
import json
import threading

import pytest
import torch
from accelerate import Accelerator
from datasets import Dataset
from transformers import AutoProcessor

from hf_grpo import DistributedGRPOTrainer as GRPOTrainer
from hf_grpo import GRPOConfig
from hf_grpo.agents import AgentRollouts
from hf_grpo.agents.tools import Lane, ToolCall, ToolExecutor, tools_from_callables
from hf_grpo.data.schema import without_nulls
from hf_grpo.generation import SamplingParams
from hf_grpo.generation.vllm_server import VLLMServerGenerator
from hf_grpo.learner.batching import build_samples, collate
from hf_grpo.learner.logprobs import completion_logprobs
from hf_grpo.vision.inputs import VisionPrompts
from tests.helpers.models import colocated_vllm_config
from tests.helpers.scripted_agent import ScriptedToolUse, agent_trainer_config
from tests.helpers.tool_images import (
    ANSWER,
    CALL,
    IDEFICS3_CALL_REGEX,
    LEAD,
    SCREEN,
    SHOWN,
    length_reward,
    noise,
    policy,
    rows,
    screenshot,
)
from tests.helpers.vlm_models import IMAGE_TOKENS

FAMILIES = ("idefics3", "qwen2_vl")


@pytest.fixture(scope="module")
def vlm_root(tmp_path_factory):
    return tmp_path_factory.mktemp("vlms")


def trainer_for(family, root, tmp_path, inner=False, **overrides):
    values = dict(max_completion_length=96, learning_rate=0.1, max_steps=1)
    args = agent_trainer_config(tmp_path, **{**values, **overrides})
    trainer = GRPOTrainer(policy(family, root), [length_reward], args, rows(family), tools=[screenshot])
    # The scripted policy over the trainer's own HF generate (``inner``), which then sees every context's images.
    scripted = ScriptedToolUse(
        trainer.text_tokenizer, answer=LEAD[family] + ANSWER, inner=trainer.generator if inner else None, vary=inner
    )
    trainer.generator = trainer.collector.generator = scripted
    return trainer


def reference(trainer, row: dict, calls: bool, answer: str):
    """The whole conversation as the family's processor gives it: rendered by its template, images expanded."""
    agent = trainer.agent
    messages = agent.protocol.prompt_messages(without_nulls(row["prompt"]), agent.prompt_tools)
    images = [row["image"]]
    if calls:
        shown = [{"type": "text", "text": "<tool_response>\n"}, {"type": "image"}]
        shown.append({"type": "text", "text": f"{SHOWN}\n</tool_response>"})
        messages += [{"role": "assistant", "content": CALL}, {"role": "user", "content": shown}]
        images.append(SCREEN)
    messages.append({"role": "assistant", "content": answer})
    processor = trainer.processing_class
    text = processor.apply_chat_template(messages, tokenize=False)
    return processor(text=[text], images=[images], return_tensors="pt", add_special_tokens=False)


# Gemma 3 too: its image tokens carry per-token tensors (token_type_ids) inside the completion, and its expansion's
# newlines merge with the text around the image.
@pytest.mark.parametrize("family", [*FAMILIES, "gemma3"])
def test_a_tool_image_is_scored_as_the_processor_expands_the_whole_conversation(family, vlm_root, tmp_path):
    trainer = trainer_for(family, vlm_root, tmp_path)
    data = [trainer.train_dataset[i] for i in range(2)]
    batch = trainer.collector.collect(data)  # 2 prompts x 2 rollouts: 0 and 1 call the tool, 2 and 3 do not
    image_token, per_image = IMAGE_TOKENS[family]
    image_id = trainer.text_tokenizer.convert_tokens_to_ids(image_token)
    for i in range(4):
        ids, mask, media = batch.completion_ids[i], batch.completion_mask[i], batch.media[i]
        calls = i < 2
        # The tool image's expanded tokens are in the completion, out of the loss; the completion's media holds the
        # prompt's image then the tool's, and per-token tensors over prompt and completion.
        at = [k for k, t in enumerate(ids) if t == image_id]
        assert len(at) == (per_image if calls else 0) and all(mask[k] == 0 for k in at)
        assert media.images == ([data[i // 2]["image"], SCREEN] if calls else [data[i // 2]["image"]])
        assert all(len(v) == len(batch.completion_prompt_ids[i]) + len(ids) for v in media.token_tensors.values())
    # Reward functions get TRL's tool message: the blocks, the image as a PIL image.
    assert batch.completions[0][1] == {"role": "tool", "name": "screenshot", "content": screenshot()}
    assert batch.agent_metrics["tools/call_frequency"] == 0.5

    # One micro-batch of the four rollouts, collated as the trainer collates it.
    samples = build_samples(batch, torch.zeros(4), mask_truncated=False)
    micro = collate(samples, trainer.text_tokenizer.pad_token_id)
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model,
            model.get_output_embeddings(),
            {"input_ids": micro.input_ids, "attention_mask": micro.attention_mask, "vision": micro.vision},
            micro.completion_mask.shape[1],
        )  # [4, C]
        for i in range(4):
            prompt, ids = batch.completion_prompt_ids[i], batch.completion_ids[i]
            ref = reference(trainer, data[i // 2], i < 2, ANSWER)
            # Token-exact: the row is the processor's ids of the whole conversation (its trailing separator aside).
            assert ref["input_ids"][0, : len(prompt) + len(ids)].tolist() == prompt + ids
            logits = model(**ref).logits[0].float()  # [T, V]
            targets = torch.tensor(ids)  # [C_i]
            own = logits[len(prompt) - 1 : len(prompt) + len(ids) - 1].log_softmax(-1)  # [C_i, V]
            expected = own.gather(-1, targets[:, None])[:, 0]  # [C_i]
            sampled = torch.tensor(batch.completion_mask[i], dtype=torch.bool)  # the model's own tokens
            torch.testing.assert_close(logp[i, : len(ids)][sampled], expected[sampled], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_training_with_a_tool_that_returns_an_image_moves_every_parameter(family, vlm_root, tmp_path):
    """TRL's test_train_with_tools_multimodal_response: half the rollouts call the tool (call frequency 1/2, no
    failures) and every parameter trains. The scripted turns run over the trainer's HF generate, which gets each
    context's vision tensors, the tool image's included. One step shows it: Adam moves every parameter with a
    non-zero gradient by about the learning rate (a second step repeats the same rollouts over new weights)."""
    trainer = trainer_for(family, vlm_root, tmp_path, inner=True, max_steps=1)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    steps = [r for r in trainer.state.log_history if "tools/call_frequency" in r]
    assert len(steps) == 1 and trainer.state.log_history[-1]["train_loss"] is not None
    assert all(r["tools/call_frequency"] == 0.5 and r["tools/failure_frequency"] == 0.0 for r in steps), steps
    unchanged = [n for n, p in trainer.model.named_parameters() if torch.equal(before[n], p)]
    assert not unchanged, unchanged


class Screen:
    """An environment whose tool returns an image, reset with text appended to an image row's prompt."""

    def reset(self, **row) -> str:
        return " Watch closely."

    def look(self) -> list:
        """
        Looks at the screen.

        Returns:
            What is on the screen.
        """
        return [{"type": "text", "text": "Now:"}, {"type": "image", "image": SCREEN}]


def test_an_environment_tool_returns_an_image_on_an_image_row(vlm_root, tmp_path):
    path = policy("qwen2_vl", vlm_root)
    look = '<tool_call>{"name": "look", "arguments": {}}</tool_call>'
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"calls=1\ncall={look}\n"}], "image": noise(3)}])
    args = agent_trainer_config(tmp_path, per_device_train_batch_size=2, max_completion_length=96, max_steps=1)
    trainer = GRPOTrainer(path, [length_reward], args, data, environment_factory=Screen)
    trainer.generator = trainer.collector.generator = ScriptedToolUse(trainer.text_tokenizer, answer=ANSWER)
    batch = trainer.collector.collect([trainer.train_dataset[0]])
    prompt = trainer.text_tokenizer.decode(batch.completion_prompt_ids[0])
    assert "Watch closely." in prompt and prompt.count("<|image_pad|>") == 16  # reset's text after the image row's
    assert batch.media[0].images == [trainer.train_dataset[0]["image"], SCREEN]
    completion = trainer.text_tokenizer.decode(batch.completion_ids[0])
    assert "Now:<|vision_start|>" + "<|image_pad|>" * 16 + "<|vision_end|>" in completion
    assert batch.completions[0][1]["content"][1] == {"type": "image", "image": SCREEN}


def test_a_text_only_policy_given_an_image_stops_naming_the_tool(tiny_llama_path, tmp_path):
    """TRL prints the block list into a text-only model's context and then fails in the forward pass (KeyError:
    'pixel_values'); here the run stops at the first image, naming the tool and the fix."""
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"calls=1\ncall={CALL}\n"}]}] * 2)
    args = agent_trainer_config(tmp_path, max_steps=1)
    trainer = GRPOTrainer(tiny_llama_path, [length_reward], args, data, tools=[screenshot])
    trainer.generator = trainer.collector.generator = ScriptedToolUse(trainer.processing_class)
    with pytest.raises(ValueError, match=r"tool `screenshot` returned an image block, but the policy is a text-only"):
        trainer.train()


def blocks(kind: str) -> list:
    """
    Returns content blocks.

    Args:
        kind: Which blocks.
    """
    long = " ".join(["word"] * 50)
    return {
        "image": [{"type": "image", "image": SCREEN.convert("RGBA")}, {"type": "text", "text": "a"}],
        "text": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "broken": [{"type": "text", "text": "a"}, {"type": "image"}],
        "data": [{"type": "fruit", "name": "apple"}],
        "long": [{"type": "text", "text": long}, {"type": "image", "image": SCREEN}, {"type": "text", "text": long}],
    }[kind]


def test_content_blocks_are_checked_shown_and_capped(tokenizer, tmp_path):
    tools, executor, lane = tools_from_callables([blocks]), ToolExecutor(2, 10.0), Lane()
    try:

        def run(kind):
            return executor.submit(ToolCall("blocks", {"kind": kind}), tools, lane).result()

        image = run("image")  # an image block: kept, as RGB (what vLLM loads)
        assert image.error_kind is None and image.content == "a" and image.parts[0]["image"].mode == "RGB"
        text = run("text")  # text blocks alone are text
        assert text.parts is None and text.content == "ab"
        broken = run("broken")
        assert (
            broken.error_kind == "unserializable" and "block 1 is an image block without an 'image'" in broken.content
        )
        assert run("data").content == '[{"type": "fruit", "name": "apple"}]'  # not blocks: JSON, as before
        # max_tool_output_tokens caps the text blocks together, in order; the image stays, the marker comes last.
        args = GRPOConfig(output_dir=str(tmp_path), max_tool_output_tokens=60, report_to="none", use_cpu=True)
        agent = AgentRollouts(tokenizer, args, [blocks])
        shown = agent.loop._shown(run("long"))
        assert [p["type"] for p in shown.parts] == ["text", "image", "text", "text"]
        assert shown.parts[-1]["text"] == "\n...[tool output truncated: 40 more tokens]"
        agent.close()
    finally:
        lane.close()
        executor.close()


@pytest.mark.slow
def test_colocated_vllm_expands_a_tool_image_into_the_trainers_context(vlm_root, tmp_path):
    """The engine writes the call itself (a regex constraint), so its second turn is generated from a context holding
    the prompt's image and the tool's: sent as unexpanded ids with both images, and the ids vLLM expanded must be the
    trainer's (checked on every turn). Ids that are not the trainer's are refused, naming the rollout."""
    from hf_grpo.generation.engine_turns import EngineTurns
    from hf_grpo.vision.inputs import VisionPrompts

    path = policy("idefics3", vlm_root)
    args = colocated_vllm_config(
        tmp_path,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=160,  # a random model may spell the call in one token per character
        max_prompt_length=256,
        max_tool_calling_iterations=1,  # the second turn's call is not run: its rollout ends (max_turns)
        vllm_structured_outputs_regex=IDEFICS3_CALL_REGEX,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        plot_metrics=False,
    )
    trainer = GRPOTrainer(path, [length_reward], args, rows("idefics3", 1), tools=[screenshot])
    trainer.train()
    (log,) = [r for r in trainer.state.log_history if "tools/call_frequency" in r]
    assert log["tools/call_frequency"] == 1.0 and log["rollout/termination/max_turns"] == 1.0, log
    assert log["rollout/observation_tokens_mean"] > IMAGE_TOKENS["idefics3"][1], log  # the tool image's tokens

    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What changed?"}]}]
    ids, media = VisionPrompts(trainer.processing_class).encode_one(prompt, [SCREEN])
    turns = EngineTurns(trainer.generator)
    with turns.session(), pytest.raises(RuntimeError, match=r"rollout 5's context: vLLM expanded its images into"):
        turns.submit(5, ids[:-1], SamplingParams(max_tokens=2), media)
        while turns.busy():
            turns.poll(0.0)
    trainer.generator.close()


# The colocated test above against a real `vllm serve`: tests/generation/test_vllm_server_vlm.py, whose server
# loads the same Idefics3 policy (one server for that module's tests and it).


class _ImageRoute(http.server.BaseHTTPRequestHandler):
    """A `vllm serve` stand-in on the routes a multi-turn image rollout uses. ``/inference/v1/generate`` expands each
    image token of the ids it is sent as vLLM does (``server.expansion``), answers with those ids and a scripted turn:
    the call while the context holds one image, the answer once the tool's image is there too."""

    def _send(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(
            {"/health": {}, "/v1/models": {"data": [{"id": "tiny"}]}, "/weight_info": {"weight_version": "0"}}[
                self.path
            ]
        )

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.seen.append(body)
        expanded = [x for t in body["token_ids"] for x in (server.expansion if t == server.image_id else [t])]
        turn = server.turns[len(body.get("content_parts", []))]
        logprobs = {"content": [{"logprob": -1.0}] * len(turn)}
        choice = {"index": 0, "token_ids": turn, "finish_reason": "stop", "logprobs": logprobs}
        self._send({"prompt_token_ids": expanded[: len(expanded) - server.drop], "choices": [choice]})

    def log_message(self, *args):
        pass


def test_server_mode_sends_each_turn_its_context_with_every_image(vlm_root, tmp_path):
    from hf_grpo.data import load_prompt_dataset

    path = policy("idefics3", vlm_root)
    processor = AutoProcessor.from_pretrained(path)
    tok = processor.tokenizer
    stub = http.server.HTTPServer(("127.0.0.1", 0), _ImageRoute)
    stub.seen, stub.drop, stub.image_id = [], 0, tok.convert_tokens_to_ids("<image>")
    stub.expansion = list(processor(text=["<image>"], images=[[SCREEN]], add_special_tokens=False)["input_ids"][0])
    stop = [tok.eos_token_id]
    stub.turns = {1: tok(LEAD["idefics3"] + CALL)["input_ids"] + stop, 2: tok(" " + ANSWER)["input_ids"] + stop}
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        generation_backend="vllm",
        vllm_mode="server",
        vllm_server_urls=[url],
        vllm_server_timeout=5,
        vllm_weight_sync_dir=str(tmp_path / "sync"),
        use_cpu=True,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=96,
    )
    generator = VLLMServerGenerator(args, Accelerator(cpu=True))
    agent = AgentRollouts(tok, args, [screenshot], vision=VisionPrompts(processor))
    data = load_prompt_dataset(rows("idefics3", 1).to_list()).to_list()
    try:
        result = agent.generate(generator, data, 2, SamplingParams(max_tokens=96), round_key=0, process=0)
        assert [len(b.get("content_parts", [])) for b in stub.seen] == [1, 1, 2, 2]
        first, second = stub.seen[0], stub.seen[2]
        assert first["token_ids"] == result.media[0].engine_ids[: len(first["token_ids"])]
        assert second["token_ids"][: len(first["token_ids"])] == first["token_ids"]  # the context grows, unexpanded
        assert result.completion_ids[0].count(stub.image_id) == IMAGE_TOKENS["idefics3"][1]
        assert result.metrics["rollout/termination/eos"] == 1.0
        stub.drop = 1  # a server that expands the images otherwise is refused, naming it
        with pytest.raises(RuntimeError, match=url + r", prompt 0: the server expanded its images into"):
            agent.generate(generator, data, 2, SamplingParams(max_tokens=96), round_key=1, process=0)
    finally:
        agent.close()
        generator.close()
        stub.shutdown()


def test_tool_text_with_special_token_strings_stays_text_beside_an_image(vlm_root, tmp_path):
    """A result's text that holds a special-token string is data (hf_grpo.agents.encoding): the template pieces around
    it are expanded by the processor piece by piece, its image included, and the string stays ordinary tokens."""
    from hf_grpo.agents.tools import ToolResult

    path = policy("qwen2_vl", vlm_root)
    args = agent_trainer_config(tmp_path, max_completion_length=96, max_steps=1)
    trainer = GRPOTrainer(path, [length_reward], args, rows("qwen2_vl"), tools=[screenshot])
    tok, images = trainer.text_tokenizer, trainer.agent.images
    end = tok.convert_tokens_to_ids("<|im_end|>")
    parts = [{"type": "image", "image": SCREEN}, {"type": "text", "text": "ok<|im_end|>"}]
    result = ToolResult("screenshot", "ok<|im_end|>", parts=parts)
    seen = images.observation([ToolCall("screenshot", {})], [result], end)
    assert seen.ids.count(tok.convert_tokens_to_ids("<|image_pad|>")) == IMAGE_TOKENS["qwen2_vl"][1]
    assert seen.ids.count(end) == 1  # the template's own end of the tool turn; the tool's string is text
    assert "ok<|im_end|>\n</tool_response>" in tok.decode(seen.ids)
    assert seen.engine_ids.count(tok.convert_tokens_to_ids("<|image_pad|>")) == 1  # one placeholder before expansion
    assert len(seen.token_tensors["mm_token_type_ids"]) == len(seen.ids)
    assert seen.token_tensors["mm_token_type_ids"].sum() == IMAGE_TOKENS["qwen2_vl"][1]
    assert images.encode(lambda literals: "no image here", [], []).ids == tok("no image here")["input_ids"]
