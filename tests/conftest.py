import sys
from pathlib import Path

# The repository root holds `transforms/` and `dflash2_backport/`; tests import
# them from the checkout so that unit tests need no install.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
