"""The backend-independent engine: the validated config, the plan built from it once, the
client group a process hosts, the round loop over an executor, evaluation and the compute
clock."""
