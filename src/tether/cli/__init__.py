"""The command-line surfaces: ``tether``, its subcommands, and the seed door."""
