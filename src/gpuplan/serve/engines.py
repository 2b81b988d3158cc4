"""Serving engines: how each sizes its KV pool, schedules an iteration, and what host time it adds.

The same model on the same GPU serves differently under vLLM, SGLang and TensorRT-LLM because the
engines differ in three places, each read from the engine's sources:

* **Memory accounting** (``memory_rule``) of the fraction the user sets:

  - ``total`` (vLLM, vllm/v1/worker/gpu_worker.py ``determine_available_memory``): the KV pool is
    ``total x gpu_memory_utilization`` minus the peak of a profiling run (weights, activations over
    ``max_num_batched_tokens``, memory outside PyTorch such as NCCL buffers and CUDA graphs);
  - ``free`` (TensorRT-LLM, tensorrt_llm/_torch/pyexecutor/_util.py ``KvCacheCreator._cal_max_tokens``;
    the C++ runtime the same way, docs reference/memory.md): ``free_gpu_memory_fraction`` of what is
    FREE after the weights and the profiled peak, ``(total - peak) x fraction``;
  - ``static`` (SGLang, python/sglang/srt/model_executor/model_runner.py ``profile_max_num_token``):
    ``mem_fraction_static`` of the total holds the weights and the KV pool; activations and CUDA
    graphs live in the ``1 - fraction`` left over, so the pool is
    ``free after loading - total x (1 - fraction)`` = ``total x fraction - weights - context``.

* **Scheduler**: the chunked-prefill token budget, the most sequences per iteration, and whether
  an iteration mixes prefill chunks with decodes (``mixed_prefill``): vLLM V1 and TensorRT-LLM
  schedule the running decodes and prompt chunks into one batch; SGLang (``enable_mixed_chunk``
  off by default) runs a prefill batch alone whenever one can be formed and decodes only when none
  can, so every prefill stalls the running sequences for its whole duration.

* **Host time per iteration** (scheduling, preparing inputs, sampling bookkeeping, detokenising):
  ``host_fixed_s + host_per_seq_s x sequences``, added to the GPU time unless the engine overlaps
  it with the next step's GPU work (then only what exceeds the GPU step shows).

* **The front end** (``frontend_s_per_token``): vLLM V1's API server is a process of its own
  (AsyncLLM) that detokenises every output token and streams it to its client as a server-sent
  event; the engine core does not wait for it, so it is a second pipelined stage whose time per
  iteration is its cost per streamed token times the tokens the iteration emits. Where that
  outlasts the engine's iteration (many sequences of a small model), the API server sets the pace
  the clients see. vLLM's own benchmarks of one API server on Llama-3.2-1B over ShareGPT at an
  unbounded request rate, the GPU far from busy, read 12,850 output tokens/s (PR #12287, January
  2025, before its changes; an A100 host) and 14,791 (PR #15137, March 2025, before its faster
  detokenisation): 67.6 us per streamed token, the request's own handling (parsing, tokenising
  the prompt) spread over ShareGPT's ~200 output tokens. One API server is vLLM's default without
  data parallelism (``api_server_count`` defaults to the DP size). Benchmarks without HTTP
  (``trtllm-bench``, vLLM's offline ``LLM``) and engines without a source have none. How that time
  splits between a request's admission and its tokens is not published: counted per token, short
  outputs go faster than they would if admission took its share (a burst of 500 Qwen3-0.6B
  requests of 128 tokens on vLLM 0.19 read 12,150 tokens/s: 14,791 per token, 9,430 at 73.65
  requests/s), and the wait shows in the streams' ITL where a server slow to admit puts it in TTFT.

* **KV blocks on demand** (``kv_on_demand``): vLLM allocates a sequence's blocks as its tokens are
  computed (V1 vllm/v1/core/sched/scheduler.py ``schedule`` calls ``KVCacheManager.allocate_slots``
  for the step's new tokens, and preempts the newest request when none is free; V0's block manager
  ``append_slots`` the same), so in a steady state a sequence holds its prompt and on average half
  its output, and the pool runs more sequences than it could hold at full length. SGLang's pool
  fills as tokens come too, but it admits a request only while the running ones keep a reserve of
  ``new_token_ratio`` times their remaining output (schedule_policy.py ``PrefillAdder``); the ratio
  decays from 0.7 to 0.7 x 0.14 over 600 steps without a retraction (global_config.py
  ``default_init_new_token_ratio``, ``default_min_new_token_ratio_factor``,
  ``default_new_token_ratio_decay_steps``), so in a steady state a sequence holds its prompt, half
  its output and that floor times the other half (``kv_reserve_ratio``; a retraction raises the
  ratio again, so this is the fuller end); serve-sim runs the ratio itself (``TokenRatio``).
  TensorRT-LLM's default GUARANTEED_NO_EVICT reserves each request's whole length on admission.

* **When a new request can join** (``schedules_ahead``): an engine reads new requests once per
  iteration, before forming the next batch. vLLM V1 (``run_busy_loop``: ``_process_input_queue``
  then ``_process_engine_step``) and TensorRT-LLM's C++ executor (executorImpl.cpp
  ``executionLoop``: ``forwardSync`` of the last step, then ``fetchNewRequests``, then
  ``forwardAsync``) form iteration n + 1 after iteration n has finished, so a request arriving
  during iteration n runs in n + 1. SGLang's default overlap loop (scheduler.py
  ``event_loop_overlap``: ``recv_requests``, ``get_next_batch_to_run``, ``run_batch`` launches it,
  then ``process_batch_result`` of the previous batch waits for the GPU) forms iteration n + 1
  while the GPU runs iteration n, so that request first runs in n + 2: one more iteration of wait,
  the price of hiding the host time; so does vLLM's async scheduling (``vllm-async``, the default
  from v0.14.0). An idle engine takes a request as it comes.

``generic`` is gpuplan's engine-neutral default (vLLM's accounting, an 8192-token budget, no host
time): it is what ``serve`` ran before engine profiles, and what ``--engine`` left out still runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuplan.errors import GpuplanError
from gpuplan.specs.hardware import GPUSpec
from gpuplan.units import GiB

if TYPE_CHECKING:
    from gpuplan.serve.memory import ServeConfig

MEMORY_RULES = ("total", "free", "static")
# one vLLM V1 API server per streamed output token: vLLM PR #15137's benchmark before its change,
# 14,791 output tokens/s of Llama-3.2-1B over ShareGPT at request rate inf (see the module docstring)
FRONTEND_V1_S = 1 / 14_791
VLLM_V1 = ("vllm", "vllm-async")  # the V1 engine, scheduling synchronously or ahead: the same defaults
DECODE_ATTENTION = ("grouped", "per_query_head")


@dataclass(frozen=True)
class TokenRatio:
    """SGLang's estimate of how much of their remaining output the running requests will still
    decode (scheduler.py ``new_token_ratio``; defaults in global_config.py, later environ.py):
    ``init`` after an idle moment, less ``(init - floor) / decay_steps`` after each decode batch
    down to ``floor`` = ``init x min_factor``, and after a retraction the survivors' decoded share
    (``estimate_new_token_ratio_after_retract``: decoded tokens plus ``retract_steps`` each, over
    their output lengths). Its PrefillAdder reserves that share of each running request's
    remaining output, clipped at ``clip`` tokens (``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``), and
    admits a request only while its prompt and whole clipped output fit beside the reserve
    (schedule_policy.py ``add_one_req``). Not modelled: with ``ignore_eos`` and the radix cache
    disabled (how most published benchmarks run), SGLang instead checks that the running requests
    and the new one all fit until each has finished (``add_one_req_ignore_eos``); tried on the
    held-out rows, that rule read within 1-4 points of this one."""

    init: float = 0.7
    min_factor: float = 0.14
    decay_steps: int = 600
    retract_steps: int = 20
    clip: int = 4096

    @property
    def floor(self) -> float:
        return self.init * self.min_factor

    @property
    def decay(self) -> float:
        return (self.init - self.floor) / self.decay_steps

    def after_retract(self, decoded: float, outputs: float, requests: int) -> float:
        """The ratio after a retraction, from the surviving requests' decoded tokens and output lengths."""
        return min(1.0, (decoded + self.retract_steps * requests) / (outputs + 1))


@dataclass(frozen=True)
class Engine:
    name: str
    version: str  # the release whose sources the defaults below come from
    memory_rule: str  # "total" | "free" | "static", see the module docstring
    overlap: bool  # host work of step n runs while the GPU runs step n + 1
    host_fixed_s: float  # host seconds per iteration
    host_per_seq_s: float  # host seconds per sequence in the iteration
    block_size: int  # KV tokens per page
    note: str  # where the host-time figures come from
    # TP all-reduce policy (allreduce.py ALGORITHMS): which of NCCL and the one/two-shot kernels runs
    allreduce: str = "vllm"
    # bytes per logit the sampler's profiling run holds at its peak, for max_num_seqs sequences;
    # generic: the fp32 logits and one working copy
    sampler_bytes_per_logit: float = 8.0
    # how a decode step's attention reads a GQA/MQA model's KV cache (see ``kv_reads_per_kv_head``):
    # "grouped" (one read serves the KV head's query-head group) or "per_query_head"
    decode_attention: str = "grouped"
    # prefill attention in FP8 when the KV cache is FP8 (see ``prefill_attention_dtype``)
    fp8_context_attention: bool = False
    # a hybrid's linear-attention states share the KV pool in pages of one attention page each,
    # the attention block enlarged until its page holds a state (memory.block_tokens)
    state_pages: bool = False
    # an iteration carries decodes and prompt chunks together (False: prefill batches run alone,
    # first; see the module docstring)
    mixed_prefill: bool = True
    # iteration n + 1 is formed while the GPU runs iteration n, so a request arriving during n
    # first runs in n + 2 (see the module docstring)
    schedules_ahead: bool = False
    # speculative proposers (Proposer.method) under which the engine keeps scheduling ahead; any
    # other proposer turns it off
    ahead_with: tuple[str, ...] = ()
    # seconds of the API server process per streamed output token (see the module docstring)
    frontend_s_per_token: float = 0.0
    # KV blocks allocated as tokens are computed, not reserved for the whole length on admission
    kv_on_demand: bool = False
    # SGLang's admission estimate of the running requests' remaining output (``TokenRatio``)
    new_token_ratio: TokenRatio | None = None

    @property
    def kv_reserve_ratio(self) -> float:
        """The share of their remaining output the running sequences keep reserved in a steady
        state: SGLang's decayed ``new_token_ratio``; none elsewhere."""
        return self.new_token_ratio.floor if self.new_token_ratio is not None else 0.0

    def held_tokens(self, input_len: int, output_len: int) -> int:
        """Tokens of KV a running sequence takes of the pool on average in a steady state
        (``kv_on_demand``: its prompt, half its output and the reserve for the other half; else the
        whole length, reserved on admission)."""
        if not self.kv_on_demand:
            return input_len + output_len
        return input_len + math.ceil(output_len / 2 * (1 + self.kv_reserve_ratio))

    def kv_reads_per_kv_head(self, query_heads: int, kv_heads: int) -> float:
        """How many times a decode step reads each cached KV head, for ``query_heads`` query heads
        over ``kv_heads`` KV heads on a GPU.

        * ``grouped``: once. FlashAttention/FlashInfer decode, vLLM's paged kernels and TensorRT-LLM's
          XQA kernel (docs/source/blogs/XQA-kernel.md: "optimization for MQA and GQA during
          generation phase ... reducing data loading") load a KV head once for its whole group.
        * ``per_query_head``: TensorRT-LLM's masked multi-head attention kernel before XQA (v0.5-0.6;
          the XQA blog, measured on v0.8a, says XQA arrives "in the v0.8 releases") launches one
          thread block per (query head, sequence) and each reads its KV head
          (cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/
          decoderMaskedMultiheadAttentionTemplate.h at v0.6.1, 138f96d4: ``hi = blockIdx.x``,
          ``hi_kv = hi / qhead_per_kv``), so a KV head is read once per query head of its group,
          ``query_heads / kv_heads`` times (L2 hits among the group's blocks not credited).
        """
        if self.decode_attention == "per_query_head" and kv_heads > 0:
            return max(1.0, query_heads / kv_heads)
        return 1.0

    def prefill_attention_dtype(self, kv: str, dtype16: str, gpu: GPUSpec) -> str:
        """The tensor-core dtype the prefill (context) attention runs in for a ``kv`` cache.

        TensorRT-LLM's trtllm-bench builds FP8 and NVFP4 checkpoints with an FP8 KV cache and
        ``use_fp8_context_fmha = True`` (tensorrt_llm/bench/build/build.py ``build_command``,
        NVIDIA/TensorRT-LLM 000a01de: "Enable FHMA, and FP8 FMHA if NVFP4 or FP8 quantization is
        enabled"): Q, K and V enter the context FMHA in FP8 and its two GEMMs run on the FP8
        tensor cores, at the FP8 peak times the kernel's fraction (FlashAttention-3 reaches the
        same fraction of the FP8 peak as of the 16-bit one: ~1.2 PFLOP/s FP8 against ~740 TFLOP/s
        FP16 on H100, Shah et al. 2024, abstract). Other engines, or a 16-bit cache, run it in 16 bits.
        """
        if self.fp8_context_attention and kv == "fp8" and "fp8" in gpu.peak_flops:
            return "fp8"
        return dtype16

    def fraction(self, tp: int, gpu: GPUSpec | None = None) -> float:
        """The default memory fraction (``gpu_memory_utilization`` / ``free_gpu_memory_fraction`` /
        ``mem_fraction_static``) for ``tp`` ranks of ``gpu``."""
        if self.name == "sglang":
            # python/sglang/srt/server_args.py ServerArgs.__post_init__ (v0.4.5.post3, lines 221-238):
            # a GPU of more than 80 GiB (nvidia-smi's memory.total in MiB above 81920) keeps 13 GiB
            # out of the static pool whatever the TP, "(gpu_mem - 1024 * 13) / gpu_mem" (0.9074 on an
            # H200, as the llm-ie-benchmarks DeepSeek-R1 log prints); v0.4.4 used the TP table for
            # every GPU. Otherwise less with more TP ranks, whose NCCL and custom all-reduce buffers
            # come out of the reserve
            if gpu is not None and gpu.memory_bytes > 80 * GiB:
                return (gpu.memory_bytes - 13 * GiB) / gpu.memory_bytes
            for at_least, f in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
                if tp >= at_least:
                    return f
            return 0.88
        return 0.9  # vLLM CacheConfig.gpu_memory_utilization; TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction

    def max_batched_tokens(self, gpu: GPUSpec) -> int:
        """Tokens per iteration (chunked-prefill budget) of an online server by default."""
        big = gpu.memory_bytes >= 70 * GiB
        if self.name in VLLM_V1:
            # vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER: 8192 on
            # GPUs of >= 70 GiB other than the A100 (PR #17885), 2048 elsewhere
            return 8192 if big and "a100" not in gpu.id else 2048
        if self.name == "vllm-v0":
            return 2048  # vllm/config.py SchedulerConfig (V0): chunked prefill's DEFAULT_MAX_NUM_BATCHED_TOKENS
        if self.name == "sglang":
            # server_args.py: chunked_prefill_size 2048 below 25 GB of GPU memory, else 8192
            return 8192 if gpu.memory_bytes >= 25e9 else 2048
        return 8192  # TensorRT-LLM BuildConfig / TorchLlmArgs max_num_tokens; gpuplan's generic default

    def max_num_seqs(self, gpu: GPUSpec) -> int | None:
        """Sequences per iteration by default (None: as many as the KV pool holds)."""
        big = gpu.memory_bytes >= 70 * GiB
        if self.name in VLLM_V1:
            return 1024 if big and "a100" not in gpu.id else 256  # EngineArgs.get_batch_defaults
        if self.name == "vllm-v0":
            return 256  # SchedulerConfig.max_num_seqs (V0)
        if self.name == "trtllm":
            return 2048  # TensorRT-LLM BuildConfig.max_batch_size
        return None  # SGLang derives max_running_requests from the pool; generic: the pool

    def forms_ahead(self, pp: int = 1, dp_attention: bool = False, proposer: str | None = None) -> bool:
        """Whether iteration n + 1 is formed while the GPU runs iteration n (``schedules_ahead``)
        for this deployment, ``proposer`` the speculative proposer's kind (Proposer.method) if one
        runs. SGLang turns its overlap loop off under pipeline parallelism, DP attention and any
        speculation (server_args.py ``__post_init__``: "Overlap scheduler is disabled") and runs
        ``event_loop_normal``; vLLM keeps async scheduling with MTP/EAGLE drafts only and not under
        pipeline parallelism (v0.14.0 release notes: "Excludes some not-yet-supported
        configurations: pipeline parallel, CPU backend, non-MTP/Eagle spec decoding")."""
        if not self.schedules_ahead or pp > 1 or dp_attention:
            return False
        return proposer is None or proposer in self.ahead_with

    def host_s(self, seqs: float) -> float:
        return self.host_fixed_s + self.host_per_seq_s * seqs

    def exposed_host_s(self, gpu_s: float, seqs: float) -> float:
        """Host time the iteration adds to the GPU time."""
        host = self.host_s(seqs)
        return max(0.0, host - gpu_s) if self.overlap else host

    def paced(self, engine_s: Any, tokens: Any) -> Any:
        """An iteration of ``engine_s`` seconds that streams ``tokens`` output tokens (numbers or
        numpy arrays) as its clients see it: the API server streams them beside the engine, so the
        slower of the two sets the pace."""
        return np.maximum(engine_s, self.frontend_s_per_token * tokens)


# vLLM's profiling pass samples max_num_seqs dummy rows with top-k and top-p set
# (gpu_model_runner.py _dummy_sampler_run). Its PyTorch-native path sorts the vocabulary
# (vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p; V0's sampler sorts the same way),
# and the peak is inside that sort: the head's bf16 logits (2 B, still held by the caller), the
# sampler's fp32 copy (4), torch.sort's outputs, values (4) and int64 indices (8), and, for 128 or
# more rows, what ATen's segmented_sort_pairs allocates (aten/src/ATen/native/cuda/Sort.cu): an
# int64 iota of source indices (8) and cub::DeviceSegmentedRadixSort's temporary storage, which
# holds an alternate key and value buffer when the input may not be overwritten (4 + 8): 38 B. The
# masks, softmax and scatter after it peak lower (28 B). Six vLLM V1 logs of 2025 (llm-d's, Qwen3
# 0.6B/32B, Llama 3.1 8B, Llama 3.3 70B, gpt-oss 20B/120B; vocabularies of 128K-201K) imply
# 38.3-38.5 B per logit over 1,024 rows (tests/serve/test_validate_kv.py). Where FlashInfer was
# installed, V1 up to 0.11.0 sampled with it instead (its default until PR #26859, 2025-10); a
# published run rarely says which, and the ``vllm`` profile takes the sort its logs show.
SORTING_SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 8 + 8 + 4 + 8
# FlashInfer's top_k_top_p_sampling_from_logits (flashinfer/sampling.py, "top_k_first") masks the
# fp32 logits into a new tensor (top_k_mask_logits, 4 B) and softmaxes that into another (4 B),
# then rejection-samples without a sort: with the bf16 and fp32 logits, 14 B. vLLM's default on CUDA
# since PR #40376 (2026-04, "Enable FlashInfer top-k/top-p sampler by default"); between PR #26859
# (2025-10, "Disable FlashInfer sampler by default") and it, a Triton top-k/top-p kernel (not read).
# vLLM 0.19.0's 28 logs imply about 15 B per logit.
FLASHINFER_SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 4

_VLLM = Engine(
    "vllm",
    "V1 engine (0.8-0.13), synchronous scheduling",
    "total",
    overlap=False,
    host_fixed_s=0.0,
    # vllm-project/vllm issue #10634 and PR #11133: with V1's AsyncLLM, Llama-2-7B at batch 256
    # left a 5-6 ms host gap between decode steps (GIL contention of scheduling, input
    # preparation and output processing), about 5.5 ms / 256 per sequence
    host_per_seq_s=5.5e-3 / 256,
    block_size=16,
    note="5-6 ms host gap per decode step at batch 256 (vLLM issue #10634, PR #11133)",
    state_pages=True,  # V1's hybrid KV cache manager (HybridAttentionMambaModelConfig)
    frontend_s_per_token=FRONTEND_V1_S,
    kv_on_demand=True,
    sampler_bytes_per_logit=SORTING_SAMPLER_BYTES_PER_LOGIT,
)

ENGINES = {
    e.name: e
    for e in (
        Engine(
            "generic",
            "gpuplan",
            "total",
            overlap=True,
            host_fixed_s=0.0,
            host_per_seq_s=0.0,
            block_size=16,
            note="no host time: the GPU-side model alone",
            allreduce="nccl",  # NCCL only
        ),
        _VLLM,
        # vLLM v0.14.0 release notes: "Async scheduling is now enabled by default" (#27614); the
        # scheduler forms step n + 1 while the GPU runs step n (AsyncScheduler), and the model runner
        # prepares inputs and samples without waiting for the GPU (PR #23569, "Fully overlap model
        # execution": "an elimination of the CPU overhead of input preparation and sampling"), so
        # the synchronous engine's host work hides behind the GPU; defaults and memory unchanged but
        # for the sampler its releases profile (FLASHINFER_SAMPLER_BYTES_PER_LOGIT)
        replace(
            _VLLM,
            name="vllm-async",
            version="V1 engine with async scheduling: the default from 0.14.0, --async-scheduling from 0.10",
            overlap=True,
            note="host work overlapped with the GPU (vLLM async scheduling, default from v0.14.0)",
            schedules_ahead=True,
            ahead_with=("mtp",),
            sampler_bytes_per_logit=FLASHINFER_SAMPLER_BYTES_PER_LOGIT,
        ),
        Engine(
            "vllm-v0",
            "V0 engine (0.5.x), before multi-step scheduling",
            "total",
            overlap=False,
            # vllm-project/vllm RFC #6854 (multi-step scheduling): each decode step of the V0 engine
            # left "about 4 ms of GPU bubble" (sampled tokens to the CPU, pythonising outputs,
            # preparing the next step's inputs, the scheduler)
            host_fixed_s=4e-3,
            host_per_seq_s=0.0,
            block_size=16,
            note="about 4 ms GPU bubble per decode step (vLLM RFC #6854)",
            kv_on_demand=True,  # vllm/core/block_manager.py append_slots
            sampler_bytes_per_logit=SORTING_SAMPLER_BYTES_PER_LOGIT,  # V0's sampler sorts too
        ),
        Engine(
            "sglang",
            "0.4.5",
            "static",
            # the overlap ("zero-overhead") scheduler runs one batch ahead: LMSYS blog 2024-12-04,
            # SGLang v0.4; python/sglang/srt/managers/scheduler.py event_loop_overlap
            overlap=True,
            host_fixed_s=0.0,
            host_per_seq_s=5.5e-3 / 256,  # host work of the same kind as vLLM's, hidden behind the GPU
            block_size=1,  # token-granular KV pool (page_size 1)
            note="host work overlapped with the GPU (SGLang v0.4 zero-overhead scheduler)",
            # python/sglang/srt/server_args.py ``enable_mixed_chunk: bool = False``; managers/
            # scheduler.py ``get_next_batch_to_run``: "Run prefill first if possible", the running
            # batch decodes only when ``get_new_batch_prefill`` forms no batch (v0.4.x through 0.5)
            mixed_prefill=False,
            # server_args.py ``disable_overlap_schedule: bool = False``: event_loop_overlap runs
            schedules_ahead=True,
            kv_on_demand=True,
            new_token_ratio=TokenRatio(),  # its admission reserve (see the module docstring)
        ),
        Engine(
            "trtllm",
            "0.17 (TensorRT engine, C++ executor)",
            "free",
            # ASSUMED, not sourced: the C++ executor's loop (executorImpl.cpp ``executionLoop``)
            # waits for step n (``forwardSync``) before it fetches requests and launches step n + 1
            # (``forwardAsync``), so its host work is not overlapped by design (the PyTorch
            # backend's overlap scheduler, docs features/overlap-scheduler.md, came later); but that
            # work is C++, its size unpublished, and vLLM's Python per-sequence figure charged in
            # full would slow the rows this profile reads within a few percent (the 70B/405B
            # tables), so it is charged only where it would outlast the GPU step
            overlap=True,
            host_fixed_s=0.0,
            host_per_seq_s=5.5e-3 / 256,
            block_size=64,  # tensorrt_llm/plugin/plugin.py enable_paged_kv_cache(tokens_per_block=64)
            note="host work overlapped with the GPU (TensorRT-LLM overlap scheduler)",
            allreduce="trtllm",  # the PyTorch backend's AUTO strategy (thop/allreduceOp.cpp)
            fp8_context_attention=True,  # trtllm-bench build: use_fp8_context_fmha with FP8 KV
        ),
        Engine(
            "trtllm-0.6",
            "0.5-0.6.1 (TensorRT engine, gptSessionBenchmark), before the XQA kernel",
            "free",
            overlap=True,  # the C++ runtime, as the later executor (host work off the GPU's path)
            host_fixed_s=0.0,
            host_per_seq_s=5.5e-3 / 256,
            block_size=64,
            note="C++ runtime; decode attention in the masked MHA kernel, one KV read per query head",
            # docs/source/performance.md at v0.6.1 (138f96d4): the engines are built without
            # --use_custom_all_reduce, so the TP all-reduces run in NCCL
            allreduce="nccl",
            decode_attention="per_query_head",
        ),
    )
}


def engine(name: str) -> Engine:
    if name not in ENGINES:
        raise GpuplanError(
            "engine", f"no engine profile {name!r}", f"use one of {', '.join(n for n in ENGINES if n != 'generic')}"
        )
    return ENGINES[name]


def engine_config(
    name: str | None,
    gpu: GPUSpec,
    tp: int = 1,
    gpu_memory_utilization: float | None = None,
    block_size: int | None = None,
    max_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    max_model_len: int | None = None,
) -> ServeConfig:
    """A ServeConfig with ``name``'s defaults for what the caller left as None."""
    from gpuplan.serve.memory import ServeConfig  # memory.py reads the engine's memory rule

    e = engine(name or "generic")
    seqs = max_num_seqs if max_num_seqs is not None else e.max_num_seqs(gpu)
    if max_batched_tokens is not None and seqs and max_batched_tokens < seqs:
        # vLLM's SchedulerConfig refuses the same: every running sequence decodes a token a step
        raise GpuplanError(
            "max_batched_tokens",
            f"{max_batched_tokens} tokens a step is fewer than max_num_seqs ({seqs}) sequences",
            f"use `max_batched_tokens={seqs}` or more, or lower `max_num_seqs`",
        )
    return ServeConfig(
        gpu_memory_utilization=gpu_memory_utilization if gpu_memory_utilization is not None else e.fraction(tp, gpu),
        block_size=block_size if block_size is not None else e.block_size,
        max_batched_tokens=max_batched_tokens if max_batched_tokens is not None else e.max_batched_tokens(gpu),
        max_num_seqs=max_num_seqs if max_num_seqs is not None else e.max_num_seqs(gpu),
        max_model_len=max_model_len,
        engine=e.name,
    )
