"""python -m nodeimage: see nodeimage.main."""

import sys

from nodeimage.main import main

sys.exit(main())
