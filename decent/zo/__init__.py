"""Zeroth-order estimators: dense MeZO perturbations regenerated from seeds, and SubCGE's
shared low-rank subspace, where applying a (seed, coefficient) message costs O(#layers)."""
