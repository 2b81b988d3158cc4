"""The JSON document of ``gpuplan serve`` (``to_dict``): a serving estimate's memory per GPU,
KV paging against contiguous allocation, latency and throughput at the request's concurrency and
along the throughput curve, $/M tokens, KV swap-in and speculative decoding (plan.py computes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.estimate.comm import efficiency
from gpuplan.serve.bands import engine_band
from gpuplan.serve.engines import engine
from gpuplan.serve.kv import kv_bytes_per_sequence, kv_bytes_per_token
from gpuplan.serve.memory import activation_phases, block_tokens, blocks_per_sequence, sampled_rows
from gpuplan.serve.steady_state import Point

if TYPE_CHECKING:  # plan.py imports this module to re-export to_dict
    from gpuplan.serve.plan import ServeEstimate


def _point(p: Point) -> dict:
    return {
        "concurrency": p.concurrency,
        "running": p.running,
        "queued": p.queued,
        "queue_wait_s": p.queue_wait_s,
        "decoding": p.decoding,
        "iteration_s": p.iteration_s,
        "tpot_s": p.tpot_s,
        "ttft_s": p.ttft_s,
        "output_tokens_per_s": p.output_tokens_per_s,
    }


def to_dict(e: ServeEstimate) -> dict:
    r, d, mem, p = e.request, e.deployment, e.memory, e.point
    m, cfg = r.model, r.config
    length = r.input_len + r.output_len
    paged = blocks_per_sequence(d, cfg, length) * mem.kv_block_bytes
    contiguous = kv_bytes_per_sequence(m, d.kv, e.model_max_len, d.tp) * mem.layers / m.num_layers
    # an MTP draft (ServeRequest.mtp) keeps one more attention layer's KV beside the target's
    draft_kv = (m.num_attention_layers + 1) / m.num_attention_layers if r.mtp else 1.0
    exact = kv_bytes_per_sequence(m, d.kv, length, d.tp) * mem.layers / m.num_layers * draft_kv
    out = {
        "model": m.name,
        "model_notes": list(m.notes),
        "gpu": d.gpu.id,
        "tp": d.tp,
        "pp": d.pp,
        "dp_attention": d.dp_attention,
        "gpus": d.gpus,
        "weights": d.weights.name,
        "kv": d.kv.name,
        "input_len": r.input_len,
        "output_len": r.output_len,
        "engine": {
            "name": cfg.engine,
            "memory_rule": engine(cfg.engine).memory_rule,
            "max_batched_tokens": cfg.max_batched_tokens,
            "max_num_seqs": cfg.max_num_seqs,
            "host_note": engine(cfg.engine).note,
            # one API server's streaming pace (engines.py frontend_s_per_token); None: not modelled
            "api_server_tokens_per_s": (
                1 / engine(cfg.engine).frontend_s_per_token if engine(cfg.engine).frontend_s_per_token else None
            ),
        },
        "memory": {
            "per_gpu": {
                "weights": mem.weights,
                "kv_cache": e.kv_needed,
                "activations": mem.activations,
                "other": mem.other,
                "total": mem.weights + e.kv_needed + mem.activations + mem.other,
            },
            "kv_pool": max(0.0, mem.kv_pool),
            "budget": mem.budget,
            "capacity": mem.capacity,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            # the profiling pass's two phases, the larger of which is the activation peak: the forward
            # over max_batched_tokens, the sampler over sampled_rows rows of the vocabulary
            "activation_phases": dict(zip(("forward", "sampler"), activation_phases(d, cfg), strict=True)),
            "sampled_rows": sampled_rows(cfg),
            "block_size": block_tokens(d, cfg),
            "fits": e.kv_needed <= mem.kv_pool,
        },
        "kv_bytes_per_token": kv_bytes_per_token(m, d.kv) * draft_kv,
        "kv_bytes_per_token_per_gpu": kv_bytes_per_token(m, d.kv, d.tp) * mem.layers / m.num_layers * draft_kv,
        "kv_bytes_per_sequence_per_gpu": exact,
        "max_concurrency": e.max_concurrency,
        # sequences the pool keeps running in a steady state: more than at full length where the
        # engine allocates KV blocks as tokens come (engines.py kv_on_demand)
        "seats": e.seats,
        "held_tokens_per_sequence": engine(cfg.engine).held_tokens(r.input_len, r.output_len),
        "max_context_at_concurrency": e.max_context_at_concurrency,
        "concurrency": p.concurrency,
        "running": p.running,
        "queued": p.queued,
        "queue_wait_s": p.queue_wait_s,
        "decoding": p.decoding,  # of the running: the others await their first token
        "paging": {
            "paged_bytes_per_sequence": paged,
            "paged_waste_fraction": 1 - exact / paged if paged else 0.0,
            "contiguous_bytes_per_sequence": contiguous,
            "contiguous_max_concurrency": int(max(0.0, mem.kv_pool) // contiguous) * mem.kv_groups if contiguous else 0,
            "contiguous_waste_fraction": 1 - exact / contiguous if contiguous else 0.0,
        },
        "ttft_s": p.ttft_s,
        "tpot_s": p.tpot_s,
        "e2e_s": p.ttft_s + (r.output_len - 1) * p.tpot_s,
        "output_tokens_per_s": p.output_tokens_per_s,
        "input_tokens_per_s": p.input_tokens_per_s,
        "output_tokens_per_s_per_gpu": p.output_tokens_per_s / d.gpus,
        "decode_step_s": e.decode_step.seconds,
        "decode_step_parts_s": e.decode_step.parts,
        "prefill_s": e.prefill.seconds,
        "prefill_parts_s": e.prefill.parts,
        "compute_bound_batch": e.compute_bound_batch,
        # the tensor-core rate over the MAMF the replica is timed at: one GPU its own measured clock,
        # several GPUs the multi-GPU fit (specs/hardware.py for_job; Deployment)
        "sustained": efficiency(d.gpu).sustained,
        "throughput_curve": [_point(c) for c in e.curve],
        "price_per_gpu_hour": r.price_per_gpu_hour,
        "cost_per_million_input_tokens": e.cost_per_million_input_tokens,
        "cost_per_million_output_tokens": e.cost_per_million_output_tokens,
        "prefix_hit_rate": r.prefix_hit_rate,
        "kv_offload": {
            "bytes_per_sequence_per_gpu": paged,
            "host_link_bytes_per_s": d.gpu.host_bytes_per_s,
            "swap_in_s": e.offload_s,
        },
        # what validation measured for published runs of this engine profile (serve/bands.py)
        "validation": engine_band(cfg.engine),
    }
    if e.speculation is not None:
        s = e.speculation
        out["speculative"] = {
            "method": s.method,
            "draft_len": s.draft_len,
            "acceptance": s.acceptance,
            "expected_tokens_per_pass": s.expected_tokens,
            "speedup": s.speedup,
            "stops_paying_at_batch": s.break_even_batch,
            "curve": [{"batch": b, "speedup": x} for b, x in s.curve],
        }
    if e.gpus_needed is not None:
        out["gpus_needed"] = e.gpus_needed
    return out
