"""Decentralized training methods, one module each, written like the papers' algorithm
boxes. Strategies never import ray or networkx."""
