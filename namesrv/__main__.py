"""``python -m namesrv``: same as the ``mqnamesrv`` console script."""
import sys

from namesrv.server import main

sys.exit(main())
