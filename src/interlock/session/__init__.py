"""Session-aware facts: what a session already did and read (history, labels, and the
fingerprints that tell where an argument's data came from). See
:mod:`interlock.session.history` and :mod:`interlock.session.fingerprints`."""
