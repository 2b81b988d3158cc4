"""The held-out KV-pool rows (engine startup logs): every row cited, refusals matched, and the
errors no worse than when the rows were added (a regression guard; nothing was fitted to them)."""

from gpuplan.serve.validate_kv import summary, validate_kv_pools


def test_every_held_out_row_cites_its_log():
    checks = validate_kv_pools()
    assert checks and all(c.url.startswith("https://") for c in checks)


def test_engine_refusals_are_refusals_here_too():
    s = summary(validate_kv_pools())
    assert s["refusals"] >= 1 and s["refusals_matched"] == s["refusals"]


def test_kv_pools_stay_within_the_errors_reached_when_added():
    s = summary(validate_kv_pools())
    # 3.7% over the seven llm-d rows when added; 8.0% since the two DeepSeek-R1 8 x H200 starts
    # (vLLM 0.8.4 +17.8%, SGLang 0.4.5 +11.2%) joined, unfitted: the 5% is not met on them
    assert s["median_abs_error"] <= 0.08
    assert s["max_abs_error"] <= 0.45  # gpt-oss-120b: 1.4 GiB over a 3.3 GiB pool
