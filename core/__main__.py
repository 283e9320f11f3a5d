import sys

from procession.cli import main

sys.exit(main())
