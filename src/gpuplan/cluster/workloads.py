"""Workloads for the cluster simulator: a seeded synthetic generator and trace importers.

Importers (each returns the jobs and how many rows it skipped, by reason):

* Alibaba ``openb`` (cluster-trace-gpu-v2023, Weng et al., ATC 2023), ``openb_pod_list_*.csv``:
  ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
  deletion_time, scheduled_time``. A task wants ``num_gpu`` GPUs, or ``gpu_milli``/1000 of one when
  num_gpu is 1 and gpu_milli < 1000 (GPU sharing); it runs deletion_time - scheduled_time seconds;
  QoS LS (latency-sensitive) is tier 1, the rest (BE, Burstable, Guaranteed) tier 0; ``gpu_spec``,
  when set, lists the GPU models the task accepts, separated by ``|`` (e.g. ``V100M16|V100M32``).
  CPU-only tasks (num_gpu 0) are skipped. The node list (``openb_node_list_gpu_node.csv``) gives
  each node's GPUs and model.
* Microsoft Philly (Jeon et al., ATC 2019), ``cluster_job_log`` as a JSON list: each job has
  ``jobid``, ``submitted_time`` ("YYYY-MM-DD HH:MM:SS"), ``attempts`` with ``start_time``,
  ``end_time`` and ``detail`` (one entry per machine, each with its ``gpus``). Duration: the last
  attempt's end minus its start (earlier attempts failed; the simulator adds its own failures);
  GPUs: those of the last attempt.
* SenseTime Helios (Hu et al., SC 2021), ``cluster_log.csv``: ``job_id, user, vc, jobname,
  gpu_num, cpu_num, node_num, state, submit_time, start_time, end_time, duration, queue`` (times
  in seconds). Jobs with gpu_num 0 are skipped.

Spot reclaims as a trace (gpuplan's own format, since providers publish none): a CSV with the
header ``time_s,gpus``, one reclaim event per row: at ``time_s`` seconds after the start the
provider takes back ``gpus`` GPUs of spot capacity.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import numpy as np

from gpuplan.cluster.sim import Job
from gpuplan.errors import GpuplanError, field_ref, require


def synthetic(
    n: int,
    gpus: int,
    load: float = 0.8,
    seed: int = 0,
    spot_share: float = 0.3,
    tier_mix: tuple[float, ...] = (0.5, 0.4, 0.1),
    checkpoint: str = "daly",
    cost_s: float = 60.0,
    restart_s: float = 300.0,
    mean_s: float = 3600.0,
    sigma: float = 1.0,
) -> list[Job]:
    """Poisson arrivals at ``load`` of ``gpus``; sizes from a production-like mix (half single-GPU,
    a few 64-GPU gangs); lognormal durations of median ``mean_s``; spot only in the lowest tier."""
    require(n >= 1 and gpus >= 1, "jobs", "need at least one job and one GPU")
    require(0 < load, "load", f"must be positive, got {load}")
    require(abs(sum(tier_mix) - 1) < 1e-9, "tiers", "the tier mix must add up to 1")
    rng = np.random.default_rng(seed)
    sizes = np.array([0.5, 1, 2, 4, 8, 16, 64])
    p = np.array([0.1, 0.4, 0.15, 0.15, 0.12, 0.06, 0.02])
    fit = sizes <= gpus
    size = rng.choice(sizes[fit], p=p[fit] / p[fit].sum(), size=n)
    dur = rng.lognormal(np.log(mean_s), sigma, size=n)
    rate = load * gpus / float((size * dur).mean())
    arrival = np.cumsum(rng.exponential(1 / rate, size=n))
    tier = rng.choice(len(tier_mix), p=tier_mix, size=n)
    spot = (rng.random(n) < spot_share) & (tier == 0)
    return [
        Job(
            i,
            float(arrival[i]),
            float(size[i]),
            float(dur[i]),
            int(tier[i]),
            bool(spot[i]),
            checkpoint=checkpoint,
            cost_s=cost_s,
            restart_s=restart_s,
        )
        for i in range(n)
    ]


def _rows(path: Path, field: str = "trace") -> tuple[list[str], list[list[str]]]:
    """Header and rows of a UTF-8 CSV; blank lines are dropped (line numbers stay those of the file:
    see :func:`_numbered`)."""
    from gpuplan.inputs import read_text

    text = read_text(path, field)
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise GpuplanError(
            field, f"{path}: not a CSV file ({exc})", "pass a comma-separated file with a header"
        ) from None
    require(
        len(rows) >= 1 and any(c.strip() for c in rows[0]),
        field,
        f"{path} is empty",
        "pass a CSV file with a header row",
    )
    return [h.strip() for h in rows[0]], rows[1:]


def _numbered(rows: list[list[str]]) -> Iterator[tuple[int, list[str]]]:
    """(line number in the file, row) for the non-blank rows after the header."""
    return ((line, r) for line, r in enumerate(rows, start=2) if any(c.strip() for c in r))


def _col(header: list[str], name: str, path: Path, field: str = "trace") -> int:
    if name not in header:
        shown = ", ".join(repr(h[:30]) for h in header[:4]) + (", ..." if len(header) > 4 else "")
        raise GpuplanError(
            field,
            f"{path} line 1: no column {name!r} in the header (it starts {shown})",
            f"pass a trace of that format, or name the file's format with {field_ref('trace_format')}",
        )
    return header.index(name)


def _field(
    row: list[str],
    index: int,
    name: str,
    cast,
    path: Path,
    line: int,
    default=None,
    field: str = "trace",
    lo: float = 0.0,
    hi: float = 1e12,
):
    """One cell as a finite number in [lo, hi]; a bad one is an error naming its line and column."""
    text = row[index].strip() if index < len(row) else None
    if (text is None or text == "") and default is not None:
        return default
    try:
        value = cast(text)
    except (TypeError, ValueError):
        raise GpuplanError(
            field,
            f"{path} line {line}, column {name}: cannot read "
            f"{'a missing value' if text is None else repr(text)} as a number",
            "fix or remove that row",
        ) from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise GpuplanError(
            field,
            f"{path} line {line}, column {name}: {text} is out of range [{lo:g}, {hi:g}]",
            "fix or remove that row",
        )
    return value


def read_openb(path: str | Path) -> tuple[list[Job], Counter[str]]:
    path = Path(path)
    header, rows = _rows(path)
    c = {
        k: _col(header, k, path)
        for k in ("num_gpu", "gpu_milli", "qos", "creation_time", "deletion_time", "scheduled_time")
    }
    spec = header.index("gpu_spec") if "gpu_spec" in header else None
    jobs: list[Job] = []
    skipped: Counter[str] = Counter()
    for line, r in _numbered(rows):
        n_gpu = _field(r, c["num_gpu"], "num_gpu", int, path, line, hi=1e6)
        milli = _field(r, c["gpu_milli"], "gpu_milli", int, path, line, default=0, hi=1e6)
        created = _field(r, c["creation_time"], "creation_time", float, path, line)
        # no scheduled_time: a pod the cluster never ran (Pending when the trace ended), whose
        # deletion_time - creation_time is a wait, not a run time
        start = _field(r, c["scheduled_time"], "scheduled_time", float, path, line, default=math.nan)
        end = _field(r, c["deletion_time"], "deletion_time", float, path, line)
        if n_gpu == 0:
            skipped["no GPU (CPU-only task)"] += 1
            continue
        if math.isnan(start):
            skipped["never scheduled (no run time)"] += 1
            continue
        if end <= start:
            skipped["no run time (deleted before it ran)"] += 1
            continue
        gpus = milli / 1000 if n_gpu == 1 and 0 < milli < 1000 else float(n_gpu)
        models = (
            frozenset(m.strip() for m in r[spec].split("|") if m.strip())
            if spec is not None and spec < len(r)
            else frozenset()
        )
        qos = r[c["qos"]].strip() if c["qos"] < len(r) else ""
        jobs.append(Job(len(jobs), created, gpus, end - start, tier=1 if qos == "LS" else 0, gpu_models=models or None))
    return jobs, skipped


def read_philly(path: str | Path) -> tuple[list[Job], Counter[str]]:
    from gpuplan.inputs import read_text, too_deep

    path = Path(path)
    text = read_text(path, "trace")
    try:
        log = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GpuplanError(
            "trace",
            f"{path} line {exc.lineno}, column {exc.colno}: not Philly's JSON job log ({exc.msg})",
            "pass cluster_job_log (a JSON list of jobs)",
        ) from None
    except RecursionError:
        raise too_deep("trace", path) from None
    if not isinstance(log, list):
        raise GpuplanError(
            "trace",
            f"{path} holds a JSON {type(log).__name__}, not a list of jobs",
            "pass cluster_job_log (a JSON list of jobs)",
        )
    fmt = "%Y-%m-%d %H:%M:%S"
    jobs: list[tuple[datetime, int, float]] = []  # (submitted, GPUs, run time)
    skipped: Counter[str] = Counter()
    t0: datetime | None = None
    for i, j in enumerate(log):
        if not isinstance(j, dict):
            raise GpuplanError("trace", f"{path} job {i}: {j!r:.40} is not a job object", "fix or remove that job")
        try:
            attempts = j.get("attempts") or []
            if not attempts:
                skipped["never started"] += 1
                continue
            start = datetime.strptime(attempts[-1]["start_time"], fmt)
            if attempts[-1].get("end_time") in (None, "None"):
                skipped["still running at the end of the trace"] += 1
                continue
            end = datetime.strptime(attempts[-1]["end_time"], fmt)
            # each machine of the attempt lists the GPUs it gave the job (Philly's "gpu0", "gpu1", ...)
            held = [d.get("gpus", []) for d in attempts[-1].get("detail", [])]
            if not all(isinstance(g, list) for g in held):
                raise TypeError("detail[].gpus is not a list of GPU names")
            gpus = sum(len(g) for g in held)
            submitted = datetime.strptime(j["submitted_time"], fmt)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise GpuplanError(
                "trace", f"{path} job {i} ({j.get('jobid', '?')}): cannot read it ({exc})", "fix or remove that job"
            ) from None
        if gpus == 0:
            skipped["no GPU"] += 1
            continue
        if end <= start:  # as the other readers: a job that did not run for any time is left out
            skipped["no run time"] += 1
            continue
        t0 = submitted if t0 is None else min(t0, submitted)
        jobs.append((submitted, gpus, (end - start).total_seconds()))
    if t0 is None:  # no job ran on a GPU
        return [], skipped
    out = [Job(k, (s - t0).total_seconds(), float(g), d) for k, (s, g, d) in enumerate(sorted(jobs))]
    return out, skipped


def read_helios(path: str | Path) -> tuple[list[Job], Counter[str]]:
    path = Path(path)
    header, rows = _rows(path)
    c = {k: _col(header, k, path) for k in ("gpu_num", "submit_time", "duration", "state")}
    skipped: Counter[str] = Counter()
    t0: float | None = None
    parsed: list[tuple[float, int, float]] = []  # (submitted, GPUs, run time)
    for line, r in _numbered(rows):
        gpus = _field(r, c["gpu_num"], "gpu_num", int, path, line, hi=1e6)
        submit = _field(r, c["submit_time"], "submit_time", float, path, line)
        dur = _field(r, c["duration"], "duration", float, path, line)
        if gpus == 0:
            skipped["no GPU (CPU job)"] += 1
            continue
        if dur <= 0:
            skipped["no run time"] += 1
            continue
        t0 = submit if t0 is None else min(t0, submit)
        parsed.append((submit, gpus, dur))
    if t0 is None:  # no job ran on a GPU
        return [], skipped
    jobs = [Job(k, s - t0, float(g), d) for k, (s, g, d) in enumerate(sorted(parsed))]
    return jobs, skipped


def read_openb_nodes(path: str | Path) -> tuple[tuple[int, ...], tuple[str, ...], Counter[str]]:
    """GPUs and GPU model of each node from ``openb_node_list_gpu_node.csv`` (``sn, cpu_milli,
    memory_mib, gpu, model``); nodes without GPUs are skipped."""
    path = Path(path)
    header, rows = _rows(path, "nodes_file")
    col, mcol = _col(header, "gpu", path, "nodes_file"), _col(header, "model", path, "nodes_file")
    gpus: list[int] = []
    models: list[str] = []
    skipped: Counter[str] = Counter()
    for line, r in _numbered(rows):
        g = _field(r, col, "gpu", int, path, line, field="nodes_file", hi=1024)
        if g <= 0:
            skipped["node without GPUs"] += 1
        else:
            gpus.append(g)
            models.append(r[mcol].strip() if mcol < len(r) else "")
    require(
        len(gpus) > 0,
        "nodes_file",
        f"{path} lists no node with GPUs",
        f"pass openb_node_list_gpu_node.csv (sn,cpu_milli,memory_mib,gpu,model), or drop {field_ref('nodes_file')}",
    )
    return tuple(gpus), tuple(models), skipped


def read_reclaims(path: str | Path) -> tuple[tuple[float, float], ...]:
    """Spot reclaim events (``time_s,gpus``, module docstring), in time order."""
    path = Path(path)
    header, rows = _rows(path, "reclaims")
    ct, cg = _col(header, "time_s", path, "reclaims"), _col(header, "gpus", path, "reclaims")
    out: list[tuple[float, float]] = []
    for line, r in _numbered(rows):
        t = _field(r, ct, "time_s", float, path, line, field="reclaims")
        g = _field(r, cg, "gpus", float, path, line, field="reclaims", hi=1e7)
        if g <= 0:
            raise GpuplanError(
                "reclaims", f"{path} line {line}: a reclaim needs gpus > 0, got {g:g}", "fix or remove that row"
            )
        out.append((t, g))
    return tuple(sorted(out))


READERS = {"openb": read_openb, "philly": read_philly, "helios": read_helios}
