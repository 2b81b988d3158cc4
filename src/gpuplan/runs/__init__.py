"""The user's own runs: what a training run measured (``Run``), read from the logs people already
have (``readers``), set beside gpuplan's prediction (``compare``) and fitted into a cluster profile
(``gpuplan.estimate.calibrate``).

Nothing here imports torch: a run is read from text.
"""
