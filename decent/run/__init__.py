"""Run services: one run from a validated config to its run directory (runner), its
checkpoints, the run directory itself and experiment tracking."""
