"""What the runtime (runtime.py) records of a run besides the model: its config hash, a checksum of
its state, its RNG states, the bytes its tensors hold and its peak memory."""

from __future__ import annotations

import hashlib
import json
import random
import resource

import torch


def _stable(obj):
    """JSON for what json cannot write: a set in sorted order (its iteration order follows
    PYTHONHASHSEED, so the hash of the same config changed from run to run), anything else as text."""
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    return str(obj)


def _str_keys(obj):
    if isinstance(obj, dict):
        return {str(k): _str_keys(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_str_keys(v) for v in obj]
    return obj


def config_hash(config: dict) -> str:
    """A short hash of a run's config: a checkpoint of another config is refused. The same config
    hashes the same in every process."""
    try:
        text = json.dumps(config, sort_keys=True, default=_stable)
    except TypeError:  # keys of mixed types cannot be sorted: as text, as json writes them anyway
        text = json.dumps(_str_keys(config), sort_keys=True, default=_stable)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_checksum(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> str:
    """sha256 over the model's and the optimizer's tensors, in a fixed order."""
    h = hashlib.sha256()

    def feed(prefix: str, obj) -> None:
        if isinstance(obj, torch.Tensor):
            h.update(prefix.encode())
            h.update(obj.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                feed(f"{prefix}.{k}", obj[k])
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                feed(f"{prefix}.{i}", v)
        elif isinstance(obj, (int, float, str, bool)) or obj is None:
            h.update(f"{prefix}={obj!r}".encode())

    feed("model", model.state_dict())
    if optimizer is not None:
        feed("optim", optimizer.state_dict())
    return h.hexdigest()


def rng_state() -> dict:
    """Every RNG a run draws from (Python, NumPy, torch CPU and CUDA), to save with a checkpoint."""
    out = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        out["numpy"] = np.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(s: dict) -> None:
    """Restore what ``rng_state`` saved."""
    random.setstate(s["python"])
    torch.set_rng_state(s["torch"])
    if "numpy" in s:
        import numpy as np

        np.random.set_state(s["numpy"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def peak_memory() -> dict:
    """This process's peak memory so far: on CUDA the caching allocator's peaks (what
    ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` say; gpuplan's memory model
    predicts the allocated peak), else the host's peak resident set."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        alloc = float(torch.cuda.max_memory_allocated())
        return {
            "peak_memory_bytes": alloc,
            "memory_kind": "cuda",
            "peak_allocated_bytes": alloc,
            "peak_reserved_bytes": float(torch.cuda.max_memory_reserved()),
        }
    return {"peak_memory_bytes": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024), "memory_kind": "rss"}


def _local_bytes(t: torch.Tensor) -> int:
    """Bytes this rank holds for ``t``: a DTensor's (FSDP2) local shard, else the tensor."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def tensor_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    """Bytes of this rank's parameters, gradients and optimizer state (tensors only), the
    components gpuplan's memory model names ``weights``, ``gradients`` and ``optimizer``. Summed
    from the tensors themselves, so they hold whatever dtype and sharding the run really uses.
    Shared parameters (tied embeddings) count once."""
    params = {id(p): p for p in model.parameters()}.values()
    out = {
        "weights": sum(_local_bytes(p) for p in params),
        # a gradient has its parameter's shape and dtype; after zero_grad() (set_to_none) it is
        # gone until the next backward, so an absent one counts as its parameter
        "gradients": sum(_local_bytes(p.grad if p.grad is not None else p) for p in params if p.requires_grad),
    }
    if optimizer is not None:
        out["optimizer"] = sum(
            _local_bytes(v)
            for state in optimizer.state.values()
            for v in state.values()
            if isinstance(v, torch.Tensor) and v.dim() > 0  # step counters are scalars
        )
    return out
