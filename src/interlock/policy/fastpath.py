"""The switch between a check's specialised paths and the reference path.

With :data:`SPECIALISED` on (always, outside tests), a policy is judged through what
ADR 0016 builds once and reuses: extraction planned per shape of call
(``policy/shapes.py``), condition tests generated for their shape
(``policy/conditiontests.py``), ``has(args.x)`` conjuncts tested before any CEL root
is built and used as prefilter discriminators, and one generated decision function
per set of candidate tiers (``policy/specialise.py``). Off, every check takes the
reference path: the full extraction, each condition judged by its general test, each
``when:`` by its tree and program, each tier by :func:`interlock.policy.outcomes.judge`.
The equivalence tests compare the two (``tests/policy/test_specialised_equivalence.py``).

It is read when a policy is compiled and when its candidate sets and shapes are first
built, so a policy must be compiled and judged on the same side of a change.
"""

from __future__ import annotations

__all__ = ["SPECIALISED"]

#: Whether checks take the specialised paths (see the module's docstring).
SPECIALISED = True
