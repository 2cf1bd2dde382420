"""Executors the engine runs clients on: in this process (:mod:`.local`) or on Ray
actors (:mod:`.ray`)."""
