import sys

from pagoda.operator.router.cli import main

sys.exit(main())
