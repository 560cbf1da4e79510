"""``python -m fastuq.synth``: write a simulated corpus (see :func:`fastuq.synth.main`)."""

import sys

from fastuq.synth import main

sys.exit(main())
