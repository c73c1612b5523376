"""``python -m tether``: the same as the ``tether`` command."""

from tether.cli import console_main

raise SystemExit(console_main())
