"""``python -m tether``: the same as the ``tether`` command."""

from tether.cli.main import console_main

raise SystemExit(console_main())
