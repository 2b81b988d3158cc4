"""``gpuplan models`` and ``gpuplan gpus``: the catalogs listed."""

from __future__ import annotations

from gpuplan.cli.options import JsonOpt
from gpuplan.cli.output import emit_json
from gpuplan.cli.params import (
    checked,
)


@checked()
def models(json_out: JsonOpt = False) -> None:
    """List the model catalog."""
    from gpuplan import catalog
    from gpuplan.estimate.params import count_params

    rows = []
    for mid in catalog.model_ids():
        m = catalog.model(mid)
        p = count_params(m)
        entry = catalog.model_entry(mid)
        rows.append(
            {
                "id": mid,
                "model_type": m.model_type,
                "params_total": p.total,
                "params_active": p.active,
                "params_vision": p.vision,
                "layers": m.num_layers,
                "hidden_size": m.hidden_size,
                "heads": m.num_heads,
                "kv_heads": m.num_kv_heads,
                "vocab_size": m.vocab_size,
                "experts": m.num_experts,
                "source": entry["source"],
                "date": entry["date"],
            }
        )
    if json_out:
        emit_json(rows)
    else:
        from gpuplan.cli.render import render_models

        render_models(rows)


@checked()
def gpus(json_out: JsonOpt = False) -> None:
    """List the GPU catalog (dense peaks)."""
    from gpuplan import catalog

    rows = []
    for gid in catalog.gpu_ids():
        g = catalog.gpu(gid)
        price = catalog.price_per_gpu_hour(gid)
        rows.append(
            {
                "id": gid,
                "name": g.name,
                "memory_bytes": g.memory_bytes,
                "hbm_bytes_per_s": g.hbm_bytes_per_s,
                "peak_flops": g.peak_flops,
                "interconnect": g.interconnect,
                "interconnect_bytes_per_s": g.interconnect_bytes_per_s,
                "gpus_per_node": g.gpus_per_node,
                "tdp_w": g.tdp_w,
                "usd_per_gpu_hour": price[0] if price else None,
                "source": g.source,
                "date": g.date,
            }
        )
    if json_out:
        emit_json(rows)
    else:
        from gpuplan.cli.render import render_gpus

        render_gpus(rows)
