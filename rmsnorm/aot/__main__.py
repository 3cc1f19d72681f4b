import sys

from rmsnorm.aot.build import main

sys.exit(main())
