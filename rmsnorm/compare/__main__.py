"""`python -m rmsnorm.compare` is `rmsnorm-compare`."""

import sys

from rmsnorm.compare.cli import main

sys.exit(main())
