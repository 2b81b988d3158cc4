"""Hub ids resolved through huggingface_hub against a local cache these tests build (no network)."""

import json
import subprocess
import sys

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.params import count_params
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.hub import parse_hub_id

hub = pytest.importorskip("huggingface_hub")
httpx = pytest.importorskip("httpx2")

TINY = dict(
    model_type="qwen3",
    vocab_size=512,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)
COMMIT_MAIN = "a" * 40
COMMIT_V2 = "b" * 40


def _snapshot(cache, repo, commit, config, ref=None):
    """The layout huggingface_hub keeps: models--ORG--NAME/{refs/REF, snapshots/COMMIT/FILE}."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
    (root / "snapshots" / commit / "config.json").write_text(json.dumps(config))
    if ref:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _snapshot(tmp_path, "acme/tiny-qwen3", COMMIT_MAIN, TINY, ref="main")
    _snapshot(tmp_path, "acme/tiny-qwen3", COMMIT_V2, dict(TINY, num_hidden_layers=4), ref="v2")
    return tmp_path


@pytest.mark.parametrize(
    "name, parsed",
    [
        ("meta-llama/Llama-3.1-70B", ("meta-llama/Llama-3.1-70B", None)),
        ("Qwen/Qwen3-8B@main", ("Qwen/Qwen3-8B", "main")),
        ("org/name@" + COMMIT_MAIN, ("org/name", COMMIT_MAIN)),
        ("llama-3.1-70b", None),
        ("path/to/config.json", None),
        ("./x/y", None),
        ("/abs/path", None),
    ],
)
def test_parse_hub_id(name, parsed):
    assert parse_hub_id(name) == parsed


def test_hub_id_reads_config_from_the_cache(cache):
    spec = catalog.model("acme/tiny-qwen3")
    assert spec.name == "acme/tiny-qwen3" and spec.num_layers == 2
    assert count_params(spec).total == count_params(model_from_hf_config(TINY)).total
    assert spec.source == "https://huggingface.co/acme/tiny-qwen3"


def test_revision_by_branch_and_by_commit(cache):
    assert catalog.model("acme/tiny-qwen3@v2").num_layers == 4
    assert catalog.model(f"acme/tiny-qwen3@{COMMIT_MAIN}").num_layers == 2


def test_offline_miss_names_the_cause_and_the_matching_catalog_entry(cache):
    with pytest.raises(GpuplanError, match="HF_HUB_OFFLINE") as err:
        catalog.model("meta-llama/Llama-3.1-70B")
    assert "'llama-3.1-70b'" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(GpuplanError, match="acme/none") as err:
        catalog.model("acme/none")
    assert "catalog has it" not in str(err.value)


def _http_error(kind):
    response = httpx.Response(404, request=httpx.Request("GET", "https://huggingface.co/x"))
    return getattr(hub.errors, kind)("boom", response=response)


@pytest.mark.parametrize(
    "kind, says",
    [
        ("GatedRepoError", "gated"),
        ("RepositoryNotFoundError", "no Hugging Face repository"),
        ("RevisionNotFoundError", "no revision"),
        ("RemoteEntryNotFoundError", "no config.json"),
        ("HfHubHTTPError", "cannot fetch"),
    ],
)
def test_hub_errors_are_one_line_with_a_fix(kind, says, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def fail(*args, **kwargs):
        raise _http_error(kind)

    monkeypatch.setattr(hub, "hf_hub_download", fail)
    with pytest.raises(GpuplanError, match=says) as err:
        catalog.model("meta-llama/Llama-3.1-8B@nope")
    assert "\n" not in str(err.value) and "'llama-3.1-8b'" in str(err.value)


def test_cli_plans_a_hub_id_in_one_command(cache, capsys):
    from gpuplan.cli.app import main

    try:
        main(["train", "acme/tiny-qwen3", "--gpus", "1", "--mfu", "0.4", "--json"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"]["name"] == "acme/tiny-qwen3"


def test_missing_path_with_a_catalog_name_hints_it():
    with pytest.raises(GpuplanError, match="no such file") as err:
        catalog.model("./models/llama-3.1-70b.json")
    assert "'llama-3.1-70b'" in str(err.value)


def test_import_gpuplan_imports_neither_torch_nor_huggingface_hub():
    code = (
        "import sys, gpuplan, gpuplan.catalog, gpuplan.cli.app; "
        "print([m for m in ('torch', 'huggingface_hub', 'transformers') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unreachable_hub_says_one_line_without_its_retry_warnings():
    # A fresh interpreter, as the CLI starts: huggingface_hub configures its logger on a lazy
    # import, so a download that retries (and warns on each try) must still leave stderr one line
    code = (
        "import huggingface_hub, os\n"
        "os.environ.pop('HF_HUB_OFFLINE', None)\n"
        "def fail(*a, **k):\n"
        "    from huggingface_hub.utils import logging\n"
        "    logging.get_logger('huggingface_hub.utils._http').warning('Retrying in 1s [Retry 1/5].')\n"
        "    raise huggingface_hub.errors.LocalEntryNotFoundError('offline')\n"
        "huggingface_hub.hf_hub_download = fail\n"
        "from gpuplan.cli.app import main\n"
        "main(['train', 'acme/unreachable'])\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: model: cannot read config.json")
