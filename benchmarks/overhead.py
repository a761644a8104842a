"""``python benchmarks/overhead.py [--quick] [--json PATH] [--profile]``: the recorded-op overhead
benchmark from a checkout, without installing. The benchmark itself is `models.bench.overhead`
(part of the installed package, so that `hecate bench overhead` runs from any install)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models.bench.overhead import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
