"""What every process that opens the workspace's store loads first: the packages that register their tables,
deletion checks and queues with the run store (backend.runs.store.register_references), and labeling's dataset
source (backend.data.register_source). The lower modules never import them, they import those: each process's
entry point (the UI, the CLI, every detached job) calls `load_providers` at its start, and a store opened
without it refuses to go on."""
import functools


@functools.cache
def load_providers() -> tuple:
    """The packages loaded (each registers on import)."""
    from backend import evals, labeling, sweeps
    from backend.runs.store import references_loaded

    references_loaded()
    return evals, labeling, sweeps
