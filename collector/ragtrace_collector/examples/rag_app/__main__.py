"""``python -m ragtrace_collector.examples.rag_app --requests 20 --endpoint http://127.0.0.1:4318``"""

import sys

from .run import main

sys.exit(main())
