"""Oracle for activation memory: bytes autograd saves for backward, measured with saved_tensors_hooks.

Counts each saved storage once (views and re-saves of one tensor share memory) and leaves out
parameters, which are not activations.
"""

import torch
import transformers


def saved_bytes(config: dict, dtype, attention: str, batch: int, seq: int) -> int:
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**config)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attention).to(dtype)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params:
            seen.setdefault(ptr, storage.nbytes())
        return t

    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids, use_cache=False)  # training runs without a KV cache
    return sum(seen.values())
