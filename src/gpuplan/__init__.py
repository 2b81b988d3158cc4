"""gpuplan: plan, simulate and survive large-model training and serving.

The library is pure Python and light: importing it never imports torch or the CLI.
"""

__version__ = "0.1.0"

from gpuplan.errors import GpuplanError  # noqa: E402

__all__ = ["GpuplanError", "__version__"]
