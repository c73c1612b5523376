"""``python -m tether.supervisor``: the seed door (:mod:`tether.cli.seed`)."""

import tether
from tether.cli.seed import main
from tether.supervisor.detach import exit_now

exit_now(main(asked_at=tether._LOADED_AT))
