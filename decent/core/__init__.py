"""The small vocabulary every other package uses, and which imports none of them:
errors a user can cause, messages and their wire sizes, named registries, config fields
with declared ranges, plain views of the communication graph, and per-round statistics."""
