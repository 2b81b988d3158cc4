"""Hugging Face Hub ids (``org/name[@revision]``) resolved to their ``config.json``, never weights.

``huggingface_hub`` does the fetching, so its cache (``HF_HUB_CACHE`` / ``HF_HOME``), offline mode
(``HF_HUB_OFFLINE``) and tokens (``HF_TOKEN`` or ``hf auth login``, for gated repos such as Meta's
Llama) apply as they do for transformers. It is imported only when a Hub id is planned, so that
``import gpuplan`` stays light.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from gpuplan.errors import GpuplanError

# org/name with an optional @revision (a branch, tag or commit); the Hub's own character set
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w./-]+))?$")


def parse_hub_id(name: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` when ``name`` reads as a Hub id, else None."""
    m = HUB_ID.match(name)
    if not m or name.endswith(".json"):
        return None
    return m["repo"], m["revision"]


def _offline() -> bool:
    # read at call time (huggingface_hub reads it once, at import): a CLI run or a test may set it late
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")


def _cache_dir() -> str | None:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None  # huggingface_hub's default, ~/.cache/huggingface/hub


def config_path(repo_id: str, revision: str | None = None, hint: str = "") -> Path:
    """The local path of the repo's ``config.json`` (downloaded into the Hub cache if needed).

    ``hint`` is appended to every error (the catalog entry that matches, when one does)."""
    try:
        import huggingface_hub

        # its logging module sets the library logger's level when first imported, which its lazy
        # imports put off until the download: import it now, or the level set below is undone
        import huggingface_hub.utils.logging  # noqa: F401
        from huggingface_hub import errors
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers and the test extra
        raise GpuplanError(
            "model",
            f"{repo_id!r} looks like a Hugging Face Hub id but huggingface_hub is not installed",
            f"pip install 'gpuplan[hub]' (or huggingface_hub), or pass a config.json path{hint}",
        ) from None
    where = f"{repo_id}@{revision}" if revision else repo_id
    # huggingface_hub logs each network retry as a warning; the outcome is reported once, below
    log = logging.getLogger("huggingface_hub")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return Path(
            huggingface_hub.hf_hub_download(
                repo_id, "config.json", revision=revision, cache_dir=_cache_dir(), local_files_only=_offline()
            )
        )
    except errors.GatedRepoError:  # before RepositoryNotFoundError, its base class
        raise GpuplanError(
            "model",
            f"{where} is a gated repository",
            f"accept its licence on huggingface.co, then `hf auth login` or set HF_TOKEN{hint}",
        ) from None
    except errors.RepositoryNotFoundError:
        raise GpuplanError(
            "model",
            f"no Hugging Face repository {repo_id!r} (or it is private)",
            f"check the id; for a private repo log in (`hf auth login` or HF_TOKEN){hint}",
        ) from None
    except errors.RevisionNotFoundError:
        raise GpuplanError(
            "model", f"{repo_id} has no revision {revision!r}", f"name a branch, tag or commit of the repo{hint}"
        ) from None
    except errors.LocalEntryNotFoundError:
        why = (
            "HF_HUB_OFFLINE is set and it is not in the local Hugging Face cache"
            if _offline()
            else "the Hub could not be reached and it is not in the local Hugging Face cache"
        )
        raise GpuplanError(
            "model",
            f"cannot read config.json of {where}: {why}",
            f"connect (or unset HF_HUB_OFFLINE) once to cache it, or pass a config.json path{hint}",
        ) from None
    except (errors.EntryNotFoundError, errors.RemoteEntryNotFoundError):
        raise GpuplanError(
            "model",
            f"{where} has no config.json (a GGUF-only or adapter repo?)",
            f"pass the base model's id or a config.json path{hint}",
        ) from None
    except (errors.HfHubHTTPError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GpuplanError(
            "model", f"cannot fetch config.json of {where}: {first}", f"retry, or pass a config.json path{hint}"
        ) from None
    finally:
        log.setLevel(level)
