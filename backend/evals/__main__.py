import sys

from backend.evals.job import main

sys.exit(main())
