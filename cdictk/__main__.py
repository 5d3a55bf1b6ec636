import sys

from cdictk.cli.launch import main

sys.exit(main())
