"""Weights on each serving GPU."""

import dataclasses


def test_a_multimodal_checkpoints_vision_tower_is_served_in_16_bits_on_the_first_stage():
    from gpuplan import catalog
    from gpuplan.estimate.params import vision_tensors
    from gpuplan.serve.formats import weight_format
    from gpuplan.serve.weights import stage_weight_bytes

    m = catalog.model("llama-4-scout")
    text_only = dataclasses.replace(m, vision=None)
    fmt = weight_format("fp8", catalog.gpu("h100-sxm"))
    vision = 2 * sum(t.numel for t in vision_tensors(m))
    assert vision == 2 * m.vision.params
    with_tower, without = stage_weight_bytes(m, fmt, 8, 2), stage_weight_bytes(text_only, fmt, 8, 2)
    assert with_tower[0] - without[0] == vision and with_tower[1] == without[1]
