"""The ``peer`` benchmark: Interlock against the peer toolkit's policy evaluator, each in
its own process, on one policy written in the peer's shape (see :mod:`bench.peer.policy`).

Nothing in this package imports Interlock at import time; ``bench/peer/runner.py`` runs
under the peer's own environment.
"""
