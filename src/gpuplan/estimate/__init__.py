"""Estimators, one concept per file: params, flops, activations, memory, time, cost."""
