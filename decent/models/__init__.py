"""Model builders and helpers to read and write a model's trainable parameters."""
