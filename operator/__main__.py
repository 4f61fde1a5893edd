"""`python -m pagoda.operator`: the operator without the rest of the `pagoda` CLI."""

import sys

from pagoda.operator.cli import main

sys.exit(main())
