"""Every value a user types, checked in one place: numbers, sizes, durations, rates, seeds and
output paths. Each check returns the parsed value or raises :class:`GpuplanError` naming the
field and the fix, so a command can check everything before it starts any work.

Units:

* sizes in bytes (:func:`parse_size`): ``KB``/``MB``/``GB``/``TB`` are powers of ten (1 GB = 1e9 B),
  ``KiB``/``MiB``/``GiB``/``TiB`` powers of two (1 GiB = 2^30 B), both accepted; a bare suffix
  (``K``, ``M``, ``G``, ``T``) is binary, as nccl-tests reads ``-b 8 -e 1G``; ``B`` alone is bytes.
* counts (tokens, parameters, dollars: :func:`gpuplan.units.parse_count`): ``K``/``M``/``B``/``G``/
  ``T``/``P`` are powers of ten (300B tokens = 3e11).
* durations (:func:`parse_duration`): ``ms``, ``s``, ``m``/``min``, ``h``, ``d``; a bare number is seconds.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.units import parse_count, parse_duration

# Bigger than any real run and small enough that products of them stay finite and exact in a float.
MAX_COUNT = 10**15
MAX_SEED = 2**63 - 1


def finite(
    value: float | str,
    field: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    fix: str | None = None,
) -> float:
    """``value`` as a float, finite and within [lo, hi] (open ends where asked)."""
    if fix is None:
        fix = _range_fix(lo, hi, lo_open, hi_open)
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise GpuplanError(field, f"cannot read {value!r} as a number", fix or "write a number like 0.5") from None
    if not math.isfinite(x):
        raise GpuplanError(field, f"must be a finite number, got {value!r}", fix or "write a number like 0.5")
    if lo is not None and (x < lo or (lo_open and x == lo)):
        raise GpuplanError(field, f"must be {'>' if lo_open else '>='} {lo:g}, got {value!r}", fix)
    if hi is not None and (x > hi or (hi_open and x == hi)):
        raise GpuplanError(field, f"must be {'<' if hi_open else '<='} {hi:g}, got {value!r}", fix)
    return x + 0.0  # -0.0 becomes 0.0: no "-0" in any output


def _range_fix(lo, hi, lo_open=False, hi_open=False) -> str:
    if lo is not None and hi is not None:
        return f"use a number {'above' if lo_open else 'from'} {lo:g} {'and below' if hi_open else 'to'} {hi:g}"
    if lo is not None:
        return f"use a number {'above' if lo_open else 'from'} {lo:g}"
    return "use a finite number" if hi is None else f"use a number {'below' if hi_open else 'up to'} {hi:g}"


def positive(value: float | str, field: str, fix: str | None = None) -> float:
    return finite(value, field, lo=0, lo_open=True, fix=fix)


def nonnegative(value: float, field: str, fix: str | None = None) -> float:
    return finite(value, field, lo=0, fix=fix)


def fraction(value: float, field: str, *, zero_ok: bool = True, one_ok: bool = True) -> float:
    """A share in [0, 1] (ends excluded where asked)."""
    return finite(
        value,
        field,
        lo=0,
        hi=1,
        lo_open=not zero_ok,
        hi_open=not one_ok,
        fix="give a fraction such as 0.9" if zero_ok else "give a fraction above 0, such as 0.9",
    )


def integer(value: int, field: str, *, lo: int = 1, hi: int = MAX_COUNT, fix: str | None = None) -> int:
    """An integer in [lo, hi]."""
    if fix is None:
        # MAX_COUNT only keeps arithmetic sane; quoting it as a bound (10^15 GPUs) would mislead
        fix = f"use a whole number from {lo:,}" + (f" to {hi:,}" if hi < MAX_COUNT else " up")
    if isinstance(value, bool) or not isinstance(value, int):
        raise GpuplanError(field, f"must be a whole number, got {value!r}", fix)
    if value < lo:
        what = "positive" if lo == 1 else ("non-negative" if lo == 0 else f">= {lo}")
        raise GpuplanError(field, f"must be {what}, got {value}", fix)
    if value > hi:
        raise GpuplanError(field, f"must be at most {hi:,}, got {value:,}", fix)
    return value


def seed(value: int, field: str = "seed") -> int:
    """Seeds are what numpy accepts: whole numbers from 0."""
    return integer(value, field, lo=0, hi=MAX_SEED, fix="use a seed from 0 to 2^63-1")


def price(value: float | None, field: str = "price") -> float | None:
    """USD per GPU-hour: finite and not negative (0 for hardware already paid for)."""
    if value is None:
        return None
    return finite(value, field, lo=0, hi=1e6, fix="give USD per GPU-hour, e.g. 3.0")


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTP]?)(i?)(B?)\s*$", re.IGNORECASE)
_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


def parse_size(text: str | float | int, field: str, *, zero_ok: bool = False) -> float:
    """Bytes from ``1GB`` (1e9), ``1GiB`` (2^30), ``1G`` (2^30, as nccl-tests), ``512K``, ``300B`` or ``4096``."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _SIZE.match(str(text))
        # "300B": three hundred bytes; "1iB" or "1i" without a prefix is not a unit
        if not m or (m.group(3) and not m.group(2)) or (m.group(3) and not m.group(4)):
            raise GpuplanError(
                field,
                f"cannot read {text!r} as a size",
                "write it like 1GB (1e9 bytes), 1GiB or 1G (2^30 bytes), 256M or 4096",
            )
        prefix, binary, b = m.group(2).upper(), bool(m.group(3)), bool(m.group(4))
        base = 1024 if binary or not b else 1000  # bare K/M/G: binary, as nccl-tests
        value = float(m.group(1)) * base ** _POWER[prefix]
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise GpuplanError(
            field,
            f"must be a {'non-negative' if zero_ok else 'positive'} finite size, got {text!r}",
            "write it like 1GB, 1GiB or 256M",
        )
    return value


def count(text: str | float | int, field: str, *, zero_ok: bool = False) -> float:
    """A count with a decimal suffix (``2T`` tokens, ``2.5M`` dollars); see :func:`gpuplan.units.parse_count`."""
    if zero_ok and str(text).strip() in ("0", "0.0"):
        return 0.0
    value = parse_count(text, field)
    if value > 1e30:
        raise GpuplanError(field, f"{text!r} is beyond any real run", "give a smaller number")
    return value


def global_batch(text: str, seq_len: int) -> int:
    """Sequences per step: sequences (512) or tokens with a suffix (16M: 16M tokens of ``seq_len``
    sequences), the same for train and search."""
    text = str(text).strip()
    gb = count(text, "global_batch")
    if not text.isdigit():  # a token count, e.g. 16M tokens of 8K sequences
        # Batch sizes quoted in tokens are powers of two (Llama 3's "16M" is 2048 x 8192): read the
        # suffix as binary when the decimal count is not a whole number of sequences.
        binary = (
            parse_count(text[:-1], "global_batch") * 2 ** (10 * "KMGT".index(text[-1].upper()) + 10)
            if text[-1:].upper() in ("K", "M", "G", "T")
            else gb
        )
        if gb % seq_len and binary % seq_len == 0:
            gb = binary
        if gb % seq_len:
            raise GpuplanError(
                "global_batch",
                f"{text} tokens is not a whole number of {seq_len}-token sequences",
                "use a multiple of `seq_len`, or give sequences",
            )
        gb //= seq_len
    fix = "give sequences per step, e.g. 512, or tokens: 16M"
    if gb > 10**9:  # say what was typed, not the float it became
        raise GpuplanError("global_batch", f"{text} is more than 1,000,000,000 sequences", fix)
    return integer(int(gb), "global_batch", hi=10**9, fix=fix)


def duration(
    text: str | float, field: str, *, zero_ok: bool = False, max_s: float = 100 * 365 * 86400.0, min_s: float = 1e-6
) -> float:
    """Seconds from ``60s``, ``10m``, ``3.1h``, ``2d`` or ``50ms``; zero only where it means something.
    Bounds: from a microsecond (shorter ones overflow the formulas that divide by them) to a century."""
    if (
        zero_ok
        and isinstance(text, str)
        and re.fullmatch(r"\s*0*\.?0*\s*(ms|s|m|min|h|d)?\s*", text)
        and re.search(r"\d", text)
    ):
        return 0.0
    value = parse_duration(text, field)
    if value < min_s:
        raise GpuplanError(
            field,
            f"{text!r} is shorter than {min_s * 1e6:g} us",
            "give a realistic duration, e.g. 50ms, 60s or 10m" + (", or 0" if zero_ok else ""),
        )
    if value > max_s:
        longest = next(
            f"{max_s / unit:g} {name}{'s' if max_s != unit and name != 's' else ''}"
            for unit, name in ((365 * 86400, "year"), (86400, "day"), (3600, "hour"), (1, "s"))
            if max_s >= unit
        )
        raise GpuplanError(
            field, f"{text!r} is longer than {longest}", "give a realistic duration, e.g. 10m, 3h or 30d"
        )
    return value


def rate(text: str | float, field: str) -> float:
    """Events per second: finite and positive."""
    return positive(text, field, fix="give events per second, e.g. 4")


# Formats matplotlib can write, by suffix (matplotlib.figure.Figure.savefig); checked here without
# importing matplotlib, which takes a second.
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".eps", ".ps")


def checked_path(path: str | Path, field: str) -> Path:
    """``path`` as a Path the file system can look up: a name it cannot hold (a component over
    NAME_MAX, a NUL byte) is refused naming ``field``, not raised as an OSError from ``exists``."""
    p = Path(path)
    try:
        p.exists()
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        shown = str(path) if len(str(path)) <= 60 else str(path)[:57] + "..."
        raise GpuplanError(field, f"cannot use {shown!r} as a path ({why})", "give a shorter path") from None
    return p


def output_path(path: str | None, field: str, *, suffixes: tuple[str, ...] | None = None) -> str | None:
    """Check that ``path`` can be written, before any work starts (so no run is lost at the end).

    ``suffixes``: the formats the writer can produce (e.g. :data:`PLOT_SUFFIXES`). ``-`` is refused
    for files that are not text. The file is not left behind if it did not exist.
    """
    if path is None:
        return None
    if not str(path).strip():
        raise GpuplanError(field, "the path is empty", "give a file name")
    p = checked_path(path, field)
    if p.is_dir():
        raise GpuplanError(field, f"{path} is a directory", "give a file name inside it")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise GpuplanError(
            field,
            f"cannot write {p.suffix or 'a file without a suffix'} ({path})",
            f"name it with one of {', '.join(suffixes)}",
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise GpuplanError(field, f"the directory {parent} does not exist", "create it first or write elsewhere")
    if not parent.is_dir():
        raise GpuplanError(field, f"{parent} is not a directory", "give a path inside a directory")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as exc:
        raise GpuplanError(field, f"cannot write {path}: {exc.strerror}", "choose a writable location") from None
    if not existed:
        try:
            os.unlink(p)
        except OSError:
            pass
    return str(p)


def input_file(path: str, field: str) -> Path:
    """An existing regular file."""
    p = checked_path(path, field)
    if not p.exists():
        raise GpuplanError(field, f"{path} does not exist", "pass an existing file")
    if p.is_dir():
        raise GpuplanError(field, f"{path} is a directory", "pass a file")
    if not p.is_file():  # a FIFO or a device (/dev/zero) would block or never end
        raise GpuplanError(field, f"{path} is not a regular file (a pipe or a device)", "pass a file")
    return p


def too_deep(field: str, path: str | Path) -> GpuplanError:
    """The error for JSON nested deeper than the parser's recursion limit (json.loads raises
    RecursionError, not JSONDecodeError): no config, log or trace is shaped like that."""
    return GpuplanError(field, f"{path}: JSON nested too deeply to be read", "pass the file the tool wrote")


def read_text(path: str | Path, field: str) -> str:
    """A text file's contents as UTF-8, with the line and column of an undecodable byte, or of a NUL
    (binary data)."""
    p = input_file(str(path), field)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise GpuplanError(field, f"cannot read {path}: {exc.strerror}", "pass a readable file") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise GpuplanError(
            field,
            f"{path} line {line}, column {col}: byte 0x{data[exc.start]:02x} is not UTF-8 text",
            "save the file as UTF-8 (or pass the text file, not a binary one)",
        ) from None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise GpuplanError(
            field, f"{path} line {line}: a NUL byte: this is a binary file, not text", "pass the text (CSV/JSON) file"
        )
    return text
