"""``python benchmarks/harness.py ...`` / ``python -m benchmarks.harness ...``: `hecate bench`
from a checkout, without installing. The harness itself is `models.bench.harness`, part of the
installed package (so that `hecate bench` works from any install); see benchmarks/README.md.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models.bench.harness import *  # noqa: E402,F401,F403  (run_script, parse_args, ...)
from models.bench.harness import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
