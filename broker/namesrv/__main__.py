"""``python -m broker.namesrv``: same as the ``mqnamesrv`` console script."""
import sys

from broker.namesrv.server import main

sys.exit(main())
