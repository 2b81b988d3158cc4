"""Catalogs as data: TOML files under gpus/, models/ and prices/, each entry citing its source.

Files are read once and cached; lookups suggest the closest names on a miss.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import re
import tomllib
from pathlib import Path

from gpuplan.errors import GpuplanError
from gpuplan.inputs import checked_path
from gpuplan.specs.gpu_file import read_gpu_file
from gpuplan.specs.hardware import Efficiency, GPUSpec
from gpuplan.specs.hf import load_hf_config, model_from_hf_config
from gpuplan.specs.hub import config_path, parse_hub_id
from gpuplan.specs.model import ModelSpec

ROOT = Path(__file__).parent
DEFAULT_PRICE_PROVIDER = "lambda"
DEFAULT_GPU = "h100-sxm"  # what a command plans on without --gpu (or a cluster file)


@functools.cache
def _read(kind: str) -> dict[str, dict]:
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted((ROOT / kind).glob("*.toml"))}


def _unknown(field: str, name: str, known: list[str], fix: str) -> GpuplanError:
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return GpuplanError(field, f"unknown {field} {name!r}", f"{hint}{fix}")


def gpu_ids() -> list[str]:
    return list(_read("gpus"))


def model_ids() -> list[str]:
    return list(_read("models"))


def _names_a_file(name: str, folder: bool = False) -> bool:
    """Whether ``name`` is an existing file (or folder): False for a name the file system cannot
    hold (inputs.checked_path refuses it), which is then an unknown catalog id."""
    try:
        path = checked_path(name, "name")
    except GpuplanError:
        return False
    return path.exists() if folder else path.is_file()


@functools.cache
def gpu(gpu_id: str) -> GPUSpec:
    """A catalog GPU id, or a path to a TOML file in the catalog's schema (validated field by field)."""
    entries = _read("gpus")
    key = gpu_id.lower()
    if key not in entries:
        if gpu_id.endswith(".toml") or _names_a_file(gpu_id):
            data = read_gpu_file(gpu_id)
            try:
                eff = _gpu_efficiency(data)
            except GpuplanError as exc:  # its efficiency key names no family: say which file
                raise exc.located(gpu_id) from None
            return GPUSpec.from_catalog(Path(gpu_id).stem, data, eff)
        raise _unknown("gpu", gpu_id, list(entries), "run `gpuplan gpus` to list them, or pass a GPU TOML file")
    data = entries[key]
    return GPUSpec.from_catalog(key, data, _gpu_efficiency(data))


def _gpu_efficiency(data: dict) -> Efficiency:
    """The GPU's efficiency family, with its GEMM fractions replaced by the GPU's own measured
    MAMF where its entry has one (``[mamf]``: e.g. GB200 at its 2500 TFLOP/s peak shares B200's
    other fractions but not its matmul rate over peak)."""
    family = efficiency(data.get("efficiency", "default"))
    own = {k: float(v) for k, v in data.get("mamf", {}).items() if k != "source"}
    return dataclasses.replace(family, gemm={**family.gemm, **own}) if own else family


@functools.cache
def efficiency(name: str) -> Efficiency:
    """Achievable-rate fractions from catalog/efficiency/NAME.toml."""
    entries = _read("efficiency")
    if name not in entries:
        raise _unknown("efficiency", name, list(entries), "name a file in catalog/efficiency/")
    return Efficiency.from_catalog(entries[name])


def model_entry(model_id: str) -> dict:
    """The raw catalog entry: source, date and the config.json facts (a copy: the files are read
    once and shared)."""
    return copy.deepcopy(_read("models")[model_id])


@functools.cache
def _catalog_model(key: str) -> ModelSpec:
    entry = _read("models")[key]
    return model_from_hf_config(entry["config"], name=key, where=f"catalog/models/{key}.toml")


def hub_ids() -> dict[str, str]:
    """Hub id (lower case) -> catalog id, read from each entry's source (``huggingface.co/ORG/NAME``
    or a leading ``ORG/NAME``)."""
    out = {}
    for key, entry in _read("models").items():
        m = re.search(r"huggingface\.co/([\w.-]+/[\w.-]+)", entry["source"]) or re.match(
            r"([\w.-]+/[\w.-]+)", entry["source"]
        )
        if m:
            out[m[1].lower()] = key
    return out


def catalog_hint(name: str) -> str:
    """'; the catalog has ...' when a catalog entry matches a Hub id or a path's name, else ''."""
    repo = name.split("@")[0].rstrip("/")
    key = hub_ids().get(repo.lower())
    if key is None:
        stem = Path(repo).name.lower().removesuffix(".json")
        key = stem if stem in _read("models") else None
    return f"; the catalog has it: pass {key!r} (`gpuplan models`)" if key else ""


def model(name: str) -> ModelSpec:
    """A catalog id (``llama-3.1-70b``), a path to a Hugging Face ``config.json`` (or its folder), or a
    Hub id (``org/name[@revision]``) whose config.json is fetched through huggingface_hub's cache."""
    key = name.lower()
    if key in _read("models"):
        return _catalog_model(key)
    if _names_a_file(name, folder=True):
        return load_hf_config(name)
    hub = parse_hub_id(name)
    if hub is not None:
        repo, revision = hub
        spec = load_hf_config(config_path(repo, revision, hint=catalog_hint(name)))
        return dataclasses.replace(spec, name=name, source=f"https://huggingface.co/{repo}")
    if name.endswith(".json") or "/" in name:
        raise GpuplanError(
            "model",
            f"no such file {name!r}",
            f"pass a catalog id, a config.json path or a Hub id org/name{catalog_hint(name)}",
        )
    raise _unknown(
        "model",
        name,
        model_ids(),
        "run `gpuplan models` to list them, or pass a config.json path or a Hugging Face Hub id (org/name)",
    )


def price_per_gpu_hour(gpu_id: str, provider: str = DEFAULT_PRICE_PROVIDER) -> tuple[float, str] | None:
    """(USD per GPU-hour, citation) for a GPU: the given provider first, then any other."""
    prices = _read("prices")
    order = [provider] + [p for p in prices if p != provider]
    for name in order:
        table = prices.get(name)
        if table and gpu_id in table["usd_per_gpu_hour"]:
            return table["usd_per_gpu_hour"][gpu_id], f"{table['provider']}, {table['date']}"
    return None


def price_or_catalog(gpu_id: str, price: float | None) -> float | None:
    """A price the user gave, or the GPU's dated catalog price (None: neither)."""
    if price is not None:
        return price
    found = price_per_gpu_hour(gpu_id)
    return found[0] if found else None


def price_with_source(gpu_id: str, price: float | None) -> tuple[float | None, str]:
    """(USD per GPU-hour, where it comes from): the user's ``price`` field, else the dated catalog
    price and its citation, else None and what to pass."""
    if price is not None:
        return price, "`price`"
    found = price_per_gpu_hour(gpu_id)
    return found if found else (None, "no catalog price for this GPU; pass `price`")


def hardware(gpu_id: str, cluster: str | None, gpus: int | None) -> tuple[GPUSpec, int]:
    """(GPU, GPU count): a cluster file's GPU with its nodes and networks (catalog/cluster_file.py),
    else the catalog's ``gpu_id`` entry; the count defaults to the whole cluster (8 without one)."""
    if not cluster:
        return gpu(gpu_id), 8 if gpus is None else gpus
    from gpuplan.catalog.cluster_file import read_cluster_file

    found = read_cluster_file(cluster)
    # the file names its GPU; another one beside it is a contradiction, not a choice (only a
    # GPU other than the commands' default can be told from one not given at all)
    if gpu_id != DEFAULT_GPU and gpu(gpu_id).id != found.gpu.id:
        raise GpuplanError(
            "gpu",
            f"the cluster file's GPU is {found.gpu.id}, not {gpu_id}",
            "drop `gpu` (the cluster file sets it), or change gpu in the cluster file",
        )
    gpus = found.gpus if gpus is None else gpus
    found.check_gpus(gpus)
    return found.gpu, gpus
