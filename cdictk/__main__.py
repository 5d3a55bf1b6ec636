import sys

from cdictk.entrypoints.console import main

sys.exit(main())
