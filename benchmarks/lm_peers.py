"""``python benchmarks/lm_peers.py [--quick] [--steps N] [--json PATH]``: Hecate's language model
against same-size PyTorch peers (a transformer and two GRUs) on Hecate's own data split and
schedule, from a checkout without installing. The benchmark itself is `models.bench.lm_peers`
(part of the installed package, so that `hecate bench peers` runs from any install)."""
import os
import sys
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"     # NumPy's BLAS on one thread; read only as NumPy loads
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from models.bench.lm_peers import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
