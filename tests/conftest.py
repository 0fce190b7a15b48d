"""Suite-wide settings: the exactness checks (log-prob agreement to 1e-4, bit-exact resume)
are stated for fp32, so `dtype=auto` resolves as on a CPU without native bf16 here and in
every subprocess; the bf16 tests ask for bfloat16 by name."""

from __future__ import annotations

import os

from spiral.engines.loading import CPU_BF16_ENV

os.environ[CPU_BF16_ENV] = "0"
