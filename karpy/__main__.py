"""``python -m karpy`` is ``karpy``."""

import sys

from karpy.cli.main import main

sys.exit(main())
