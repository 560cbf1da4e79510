import sys

from fastuq.cli import main

sys.exit(main())
