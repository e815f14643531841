"""The EDA flow of the rnic core: synthesis and place-and-route reports (:mod:`.synth`), logic
depth (:mod:`.depth`), placed paths (:mod:`.placed`), area per block against the budgets
(:mod:`.area`, :mod:`.budgets`) and the installed ``rnic`` command (:mod:`.cli`).

It imports the hardware package :mod:`rnic`; :mod:`rnic` never imports it.
"""
