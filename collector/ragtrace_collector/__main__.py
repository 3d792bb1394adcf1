"""``python -m ragtrace_collector``: the same as the ``ragtrace-collector`` command."""

import sys

from ragtrace_collector.cli import main

sys.exit(main())
