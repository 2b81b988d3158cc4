"""scripts/measure_decode_gpu.py runs end to end (``--quick``, tiny shapes on the CPU), so a lent GPU's
short lease is not spent finding a broken script."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "measure_decode_gpu.py"


def test_decode_script_writes_every_family_with_positive_times(tmp_path):
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--quick"], check=True, capture_output=True)
    doc = json.loads((tmp_path / "decode.json").read_text())
    # four linears of the 8B at TP 1 and of the 70B at TP 4 and 8, three row counts each
    assert len(doc["skinny"]) == 3 * 4 * 3
    assert all(r["bf16_s"] > 0 for r in doc["skinny"])
    assert doc["attention"] and all(r["math_s"] > 0 and r["kv_bytes"] > 0 for r in doc["attention"])
    assert [r["batch"] for r in doc["step"]] == [1, 4]
    assert all("error" not in r and r["eager_s"] > 0 and r["graph_s"] > 0 for r in doc["step"])


def test_block_scaled_calls_pass_torchs_own_shape_and_stride_checks():
    """The block-FP8 GEMMs the script times on a GPU, checked on the meta device: DeepSeek-V3's
    TP 8 shapes with 1x128 activation and 128x128 weight scales as torch's scaled_mm requires them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("measure_decode_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    spec.loader.exec_module(mod)
    for n, k in mod.DEEPSEEK_TP8.values():
        for m in (1, 64, 512):
            got = mod.block_fp8(m, n, k, device="meta")
            assert got.get("block_shape") == (m, n), got


def test_compiled_decode_script_times_the_step_compiled_and_counts_its_kernels(tmp_path):
    script = SCRIPT.parent / "measure_decode_compiled_gpu.py"
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--quick"], check=True, capture_output=True)
    doc = json.loads((tmp_path / "decode_compiled.json").read_text())
    assert [r["batch"] for r in doc["compiled"]] == [1, 4]
    assert all("error" not in r and r["graph_s"] > 0 and r["eager_graph_s"] > 0 for r in doc["compiled"])
    # eager and compiled, each profiled: its kernels (CPU ops here) counted by kind with their time
    assert [r["compiled"] for r in doc["kernels"]] == [False, True]
    assert all(r["kinds"] and all(k["count"] > 0 and k["s"] > 0 for k in r["kinds"].values()) for r in doc["kernels"])
    # a prompt prefilled through the same weights, compiled, at two lengths
    assert [r["tokens"] for r in doc["prefill"]] == [64, 128]
    assert all("error" not in r and r["graph_s"] > 0 for r in doc["prefill"])
