"""Keep a lab helper's standard output for its result alone.

scripts/lab.py, the molecule scenarios and the helpers themselves parse what vllm_assets.py,
llama_assets.py, vllm_model.py and make_tiny_gguf.py print. Inside `stdout_to_stderr()` file
descriptor 1 is standard error: the helper's own prints, what its libraries write (Python or
native code) and the output of every subprocess it starts (pip, venv, the wheelhouse tool) are
progress on standard error, so nothing can come before or after the result, which the helper
prints once the block has ended. A redirect of sys.stdout alone would not reach subprocesses.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        # What Python buffered inside the block is progress too: flush it before fd 1 is back.
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
