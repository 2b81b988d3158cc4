"""Speed target of the cluster simulator: 100,000 synthetic jobs on 10,000 GPUs, with node
failures (Llama 3's rate), spot reclaims and preemption across three tiers, as a ratio to the
reference workload timed in the same process (reference.py; formerly 10 s).

Run: .venv/bin/python benchmarks/bench_cluster.py   (exits 1 if the target is missed)
"""

from __future__ import annotations

import sys
import time

import numpy as np
from reference import ratio, reference_s, verdict

from gpuplan.cluster.sim import LLAMA3_NODE_MTBF_S, ClusterConfig, ClusterSim, Job

TARGET_RATIO = ratio(10.0)


def synthetic(n: int, gpus: int, load: float, seed: int = 0) -> list[Job]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([0.5, 1, 2, 4, 8, 16, 64], p=[0.1, 0.4, 0.15, 0.15, 0.12, 0.06, 0.02], size=n)
    dur = rng.lognormal(np.log(3600), 1.0, size=n)
    rate = load * gpus / float((sizes * dur).mean())
    arrival = np.cumsum(rng.exponential(1 / rate, size=n))
    tier = rng.choice([0, 1, 2], p=[0.5, 0.4, 0.1], size=n)
    spot = (rng.random(n) < 0.5) & (tier == 0)
    return [
        Job(
            i,
            float(arrival[i]),
            float(sizes[i]),
            float(dur[i]),
            int(tier[i]),
            bool(spot[i]),
            checkpoint="daly",
            cost_s=60.0,
            restart_s=300.0,
        )
        for i in range(n)
    ]


def main() -> int:
    jobs = synthetic(100_000, 10_000, load=0.9)
    cfg = ClusterConfig(
        nodes=1250,
        gpus_per_node=8,
        policy="backfill",
        node_mtbf_s=LLAMA3_NODE_MTBF_S,
        spot_reclaim_per_hour=0.05,
        price_per_gpu_hour=3.0,
    )
    t0 = time.perf_counter()
    r = ClusterSim(cfg, jobs).run().report().to_dict()
    took = time.perf_counter() - t0
    _, passed, text = verdict(took, reference_s(), TARGET_RATIO)
    ok = passed and r["finished"] == len(jobs)
    print(
        f"100,000 jobs on 10,000 GPUs: {took:.2f} s ({len(jobs) / took:,.0f} jobs/s, {r['events']:,} events; "
        f"{text}); utilisation {r['utilisation']:.1%}, goodput "
        f"{r['goodput']:.1%}, {r['preemptions']:,} preemptions, {r['failures']:,} failures, {r['reclaims']:,} "
        f"reclaims, ${r['usd_lost']:,.0f} lost"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
