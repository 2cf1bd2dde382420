"""Tasks: datasets, their partition across clients, losses and evaluation."""
