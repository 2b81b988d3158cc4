"""The pipeline schedules as actions, their event simulation and the bubble the step time adds
(moved from gpuplan/pipeline/ so that estimate/ imports nothing above it)."""
