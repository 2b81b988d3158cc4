"""What a real transformers cache holds after a forward pass, as an engine would keep it: the bytes
of the softmax layers' keys and values (or MLA latents), and of the linear-attention layers'
states (the recurrent state in fp32, as transformers computes it; the conv's last taps - 1
inputs, where transformers keeps all taps: vLLM's gated_delta_net_state_shape and
mamba2_state_shape keep conv_kernel - 1)."""


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
