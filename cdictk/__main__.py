import sys

from cdictk.cli.console import main

sys.exit(main())
