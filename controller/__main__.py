"""``python -m controller``: same as the ``mqcontroller`` console script."""
import sys

from controller.cli import main

sys.exit(main())
