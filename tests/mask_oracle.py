"""Attention masks counted query by query: the oracle for mean_context and cp_attention_imbalance."""


def keys_seen(i: int, window: int | None = None, chunked: bool = False, document: int = 0) -> int:
    """Keys query position ``i`` attends to under a causal mask, restricted to its document of
    ``document`` tokens (0: one document), a sliding ``window`` or ``chunked`` attention's chunk."""
    j = i % document if document else i  # its position within its document
    if window is None:
        return j + 1
    return j % window + 1 if chunked else min(j + 1, window)


def counted_imbalance(
    seq: int, cp: int, window: int | None = None, balanced: bool = True, chunked: bool = False, document: int = 0
) -> float:
    """The busiest context-parallel rank's (query, key) pairs over the mean, position by position:
    ``balanced`` gives rank r chunks r and 2cp - 1 - r of 2 x cp, else the r-th of cp."""
    work = [0] * cp
    for i in range(seq):
        if balanced:
            chunk = i // (seq // (2 * cp))
            rank = chunk if chunk < cp else 2 * cp - 1 - chunk
        else:
            rank = i // (seq // cp)
        work[rank] += keys_seen(i, window, chunked, document)
    return max(work) / (sum(work) / cp)
