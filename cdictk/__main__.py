import sys

from cdictk.startpath.console import main

sys.exit(main())
