"""The engine: the only code that runs the model with hooks attached.

hooks   HookManager (every hook interplab attaches, always removed), attach/install (edits applied, sites read)
heap    the C heap's free memory handed back to the system between a CPU sweep's chunks
resume  forwards that start from a cached residual and shared cached keys/values; chunks sized to a memory budget
        that halve on out-of-memory
memo    results keyed by what was asked and the model's state, so they are never stale
core    Engine: tokens, runs with edits and caches, resumed runs, the memo and the log (what a Lab holds)
generate  generation with edits under hooks, and edits bound to every call of the plain model
prompts what a caller may pass as prompts (as_prompts), below everything that takes them
backends  the Backend interface (a forward with edits, generation with edits, a sweep's cells), the Hugging Face
        backend, and choosing one per call (backend=); vllm: the vLLM backend
"""

from . import heap
from .backends import Backend, HFBackend, Samples
from .core import (
    Cache,
    Engine,
    InterventionLog,
    Run,
    device_of,
    dtype_of,
    engine_of,
    execution_device,
    own_weights,
)
from .generate import Generation
from .hooks import HookManager, Plan, PlannedEdit, attach, attached_hooks, forward, install, run_lock, with_input
from .memo import Memo, model_state
from .prompts import as_prompts
from .resume import (
    default_budget,
    default_max_rows,
    final_logits,
    halving,
    key_values,
    prefix,
    resumed_last_logits,
    row_bytes,
    start_at,
)

__all__ = ["Engine", "Run", "Cache", "InterventionLog", "as_prompts", "device_of", "dtype_of", "engine_of",
           "execution_device", "own_weights", "Backend", "HFBackend", "Samples", "Generation",
           "HookManager", "Plan", "PlannedEdit", "attach", "attached_hooks", "forward", "install", "run_lock",
           "with_input", "Memo", "model_state", "default_budget", "default_max_rows", "final_logits", "halving",
           "key_values", "prefix", "resumed_last_logits", "row_bytes", "start_at", "heap"]
