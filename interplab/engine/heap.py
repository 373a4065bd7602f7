"""The C heap's free memory, handed back to the system between a sweep's chunks.

torch's CPU tensors come from the C library's malloc. glibc keeps what they free in its heap for reuse, and a sweep's
chunks, each of another rows x positions shape, leave holes that the next chunk's tensors do not fit: the heap grew
chunk after chunk while the tensors alive between chunks stayed the same (a 256-token resid_pre sweep of a 4-layer,
width-768 GPT-2 with eager attention: 161 MiB in use, 1 GiB free yet resident by its last chunk; the process peaked
at +1.1 GiB, benchmarks/bench_long_sweep.py). malloc_trim(0) gives the free pages back (the heap's holes too, not
only its top), so what a chunk holds is what it uses. Elsewhere (macOS, Windows, musl) it does nothing: those
allocators return large blocks themselves.
"""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the process's C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library already loaded into this process
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free() -> bool:
    """Give the C heap's free pages back to the system (glibc's malloc_trim(0)); False where there is no such call.
    A few milliseconds; the pages it frees fault in again when reused, so call it between large forwards, not
    after every small one."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


__all__ = ["release_free"]
