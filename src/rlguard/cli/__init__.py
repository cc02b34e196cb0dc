"""The command line: ``rlguard`` and its subcommands (argparse); the daemon commands and the
client of the daemon's control API."""
