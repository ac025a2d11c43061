"""The adapter's tests; ``adapter_checks`` holds the checks every adapter shares."""

import sys
from pathlib import Path

# Imported by pytest and by the Worker children the tests start (``tests.*`` modules).
_SHARED = str(Path(__file__).resolve().parents[2] / "adapter_tests")
if _SHARED not in sys.path:
    sys.path.insert(0, _SHARED)
