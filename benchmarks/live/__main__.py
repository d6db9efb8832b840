"""``python -m benchmarks.live``: see :mod:`benchmarks.live.run`."""

import sys

from benchmarks.live.run import main

sys.exit(main())
