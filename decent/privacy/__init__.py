"""Differential privacy of what a client sends: clipping, Gaussian noise, and the privacy
spent, from a maintained accountant."""
