"""The command-line surfaces: ``tether`` (:mod:`.main`), ``tether run`` (:mod:`.run`),
``tether timeout`` (:mod:`.timeout`), ``tether show``/``ls`` (:mod:`.review`) and the seed
door ``python -m tether.supervisor`` (:mod:`.seed`)."""
