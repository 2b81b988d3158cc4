"""serve-sim's requests: lengths (fixed, uniform or exponential, parsed from a flag) and a workload
of arrival times and lengths: Poisson arrivals at a rate (exponential gaps), a burst (every request
at t = 0: ``vllm bench serve``'s default ``--request-rate inf``), a closed loop's requests (sent as
others finish: simulate sets their times), or a CSV trace. A seed makes every
draw reproducible (numpy's default_rng)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuplan.errors import GpuplanError, require


@dataclass(frozen=True)
class Lengths:
    """A length distribution: ``2048`` (fixed), ``512-4096`` (uniform) or ``exp:512`` (exponential mean)."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str | int, field: str) -> Lengths:
        s = str(text).strip()
        try:
            if s.startswith("exp:"):
                out = cls("exp", float(s[4:]))
            elif "-" in s:
                lo, hi = s.split("-", 1)
                out = cls("uniform", float(lo), float(hi))
            else:
                out = cls("fixed", float(s))
        except ValueError:
            raise GpuplanError(field, f"cannot read {text!r} as a length", "write 2048, 512-4096 or exp:512") from None
        require(
            math.isfinite(out.a) and math.isfinite(out.b) and out.a >= 1 and (out.kind != "uniform" or out.b >= out.a),
            field,
            f"lengths must be at least 1 (and lo <= hi), got {text!r}",
            "write 2048, 512-4096 or exp:512",
        )
        require(out.max <= 1e8, field, f"{text!r} is longer than any model's context", "use at most 100M tokens")
        # token counts are whole (an exponential's mean may be any number)
        require(
            out.kind == "exp" or (out.a.is_integer() and out.b.is_integer()),
            field,
            f"{text!r} is not a whole number of tokens",
            "write 2048, 512-4096 or exp:512",
        )
        return out

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, size=n)
        return np.maximum(1, np.round(rng.exponential(self.a, size=n))).astype(np.int64)

    @property
    def max(self) -> float:
        return self.b if self.kind == "uniform" else (self.a * 10 if self.kind == "exp" else self.a)


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    @classmethod
    def poisson(cls, rate: float, n: int, input_len: Lengths, output_len: Lengths, seed: int = 0) -> Workload:
        require(rate > 0, "rate", f"must be positive, got {rate}")
        require(n >= 1, "requests", f"must be at least 1, got {n}")
        rng = np.random.default_rng(seed)
        arrivals = np.cumsum(rng.exponential(1 / rate, size=n))
        return cls(arrivals, input_len.sample(rng, n), output_len.sample(rng, n))

    @classmethod
    def burst(cls, n: int, input_len: Lengths, output_len: Lengths, seed: int = 0) -> Workload:
        """``n`` requests all sent at t = 0: ``vllm bench serve --request-rate inf`` (its default),
        whose ``get_request`` (vllm/benchmarks/serve.py) appends a delay of 0 for every request when
        the rate is inf and so sends them all at once; the client's aiohttp connector is unlimited
        (``limit=max_concurrency or 0``) without ``--max-concurrency``."""
        require(n >= 1, "requests", f"must be at least 1, got {n}")
        rng = np.random.default_rng(seed)
        return cls(np.zeros(n), input_len.sample(rng, n), output_len.sample(rng, n))

    @classmethod
    def closed(cls, n: int, input_len: Lengths, output_len: Lengths, seed: int = 0) -> Workload:
        """``n`` requests for a closed loop: their arrival times are set by the simulation (zero here)."""
        require(n >= 1, "requests", f"must be at least 1, got {n}")
        rng = np.random.default_rng(seed)
        return cls(np.zeros(n), input_len.sample(rng, n), output_len.sample(rng, n))

    @classmethod
    def from_trace(cls, path: Path) -> Workload:
        """CSV with columns arrival_s, input_len, output_len (one request per row); a bad cell is
        an error naming its line and column."""
        from gpuplan.inputs import read_text

        rows = list(csv.reader(read_text(path, "trace").splitlines()))
        header = [h.strip() for h in rows[0]] if rows else []
        need = ("arrival_s", "input_len", "output_len")
        missing = [c for c in need if c not in header]
        require(
            not missing,
            "trace",
            f"{path} line 1: no column {', '.join(missing)} in the header",
            "give a CSV with the header arrival_s,input_len,output_len",
        )
        cols = [header.index(c) for c in need]
        a: list[float] = []  # arrival times
        i: list[float] = []  # input and output lengths (whole numbers)
        o: list[float] = []
        for line, row in enumerate(rows[1:], start=2):
            if not any(c.strip() for c in row):
                continue
            vals: list[float] = []
            for name, col in zip(need, cols):
                text = row[col].strip() if col < len(row) else None
                v: float
                try:
                    if text is None:  # a short row: no cell for this column
                        raise ValueError(name)
                    v = float(text) if name == "arrival_s" else int(text)
                except (TypeError, ValueError):
                    raise GpuplanError(
                        "trace",
                        f"{path} line {line}, column {name}: cannot read "
                        f"{'a missing value' if text is None else repr(text)}"
                        f" as {'seconds' if name == 'arrival_s' else 'a whole number of tokens'}",
                        "fix or remove that row",
                    ) from None
                ok = math.isfinite(v) and v >= 0 if name == "arrival_s" else 1 <= v <= 10**8
                require(
                    ok,
                    "trace",
                    f"{path} line {line}, column {name}: {text} is out of range",
                    "arrival_s must be >= 0 seconds, lengths from 1 token",
                )
                vals.append(v)
            a.append(vals[0])
            i.append(vals[1])
            o.append(vals[2])
        require(len(a) > 0, "trace", f"{path} has no requests", "add rows of arrival_s,input_len,output_len")
        arrival, inputs, outputs = np.array(a, dtype=float), np.array(i, dtype=np.int64), np.array(o, dtype=np.int64)
        order = np.argsort(arrival, kind="stable")
        return cls(arrival[order], inputs[order], outputs[order])
