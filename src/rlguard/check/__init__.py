"""``rlguard check`` and ``rlguard rules test``: a log (or a rule test case) replayed through
the engine, and the text that says what it found."""
