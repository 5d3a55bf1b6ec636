import sys

from cdictk.cli.main import main

sys.exit(main())
