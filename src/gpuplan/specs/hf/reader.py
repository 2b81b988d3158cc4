"""Reading a ``config.json`` dict: every key read names itself (and the file) in its error."""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError

MISSING = object()


class Config:
    """A config dict whose reads name the key in their errors."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = data
        self.where = where

    def get(self, *keys: str, default: Any = MISSING, kind: type = int) -> Any:
        for key in keys:
            if key in self.data and self.data[key] is not None:
                value = self.data[key]
                break
        else:
            if default is MISSING:
                raise GpuplanError(
                    f"{self.where}: {keys[0]}",
                    "is missing",
                    "add it to config.json (see the model's Hugging Face config)",
                )
            return default
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, kind)
        if not ok:
            fix = {
                int: "write a whole JSON number, e.g. 4096 (no quotes)",
                float: "write a JSON number, e.g. 1e-05 (no quotes)",
                bool: "write true or false (no quotes)",
                str: 'write a JSON string, e.g. "silu"',
            }.get(kind, "fix the value in config.json")
            raise GpuplanError(f"{self.where}: {keys[0]}", f"must be {kind.__name__}, got {value!r}", fix)
        # Sizes, counts and rates in a config are never negative (nor astronomically large)
        if kind in (int, float) and not (0 <= value <= 1e12):
            raise GpuplanError(
                f"{self.where}: {keys[0]}", f"must be between 0 and 1e12, got {value!r}", "fix the value in config.json"
            )
        return value


def activation(name: str, where: str) -> str:
    """gpuplan's name of a config's ``hidden_act`` (transformers' ACT2FN keys)."""
    table = {
        "silu": "silu",
        "swiglu": "silu",
        "gelu": "gelu",
        "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_new": "gelu_new",
        "gelu_fast": "gelu_new",
        "relu": "relu",
        "relu2": "relu2",  # Nemotron, Arcee: relu(x) ** 2
        "xielu": "xielu",  # Apertus: xIELU, with two trainable scalars per MLP
    }
    if name not in table:
        raise GpuplanError(f"{where}: hidden_act", f"unsupported activation {name!r}", f"use one of {sorted(table)}")
    return table[name]
