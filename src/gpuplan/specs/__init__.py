"""Frozen dataclasses that validate themselves: model, hardware, parallel plan, training setup."""
