"""``python -m tether.supervisor``: the seed door (:mod:`tether.cli.seed`)."""

import gc
import signal

# No collection while the seed door loads its code (see tether.supervisor.detach.loading).
gc.disable()

# Ctrl-C before the supervisor's own handlers are in: the default action, no traceback.
signal.signal(signal.SIGINT, signal.SIG_DFL)

import tether  # noqa: E402
from tether.cli.seed import main  # noqa: E402
from tether.shared.process_start import process_started_at  # noqa: E402
from tether.supervisor.detach import exit_now  # noqa: E402

exit_now(main(asked_at=process_started_at(tether._LOADED_AT)))
