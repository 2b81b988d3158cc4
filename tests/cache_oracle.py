"""Oracles on transformers' linear-attention models: what its cache holds after a forward pass, as an
engine would keep it (the bytes of the softmax layers' keys and values or MLA latents, and of the
linear-attention layers' states: the recurrent state in fp32, as transformers computes it; the
conv's last taps - 1 inputs, where transformers keeps all taps: vLLM's gated_delta_net_state_shape
and mamba2_state_shape keep conv_kernel - 1), and the FLOPs its padded conv adds."""


def cache_bytes(cache) -> tuple[int, int]:
    """(KV bytes, linear-attention state bytes) of a transformers ``DynamicCache``."""
    kv = states = 0
    for layer in cache.layers:
        if hasattr(layer, "recurrent_states"):
            states += sum(t.numel() * 4 for t in layer.recurrent_states.values())
            for t in layer.conv_states.values():
                states += t.numel() * (t.shape[-1] - 1) // t.shape[-1] * t.element_size()
        else:
            kv += layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
    return kv, states


def cache_after_forward(model, context: int) -> tuple[int, int]:
    """``cache_bytes`` of ``model`` in bf16 after a forward pass over ``context`` random tokens."""
    import torch

    model = model.to(torch.bfloat16)
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, model.config.vocab_size, (1, context)), use_cache=True).past_key_values
    return cache_bytes(cache)


def padded_conv_flops(channels: int, taps: int, batch: int) -> int:
    """FLOPs FlopCounterMode counts beyond a causal conv's outputs in one layer: nn.Conv1d pads by
    taps - 1 on both sides, transformers drops the taps - 1 extra outputs of each sequence, each
    2 x taps FLOPs per channel."""
    return 2 * channels * taps * (taps - 1) * batch
