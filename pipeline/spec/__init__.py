"""Sweep specifications: what a sweep computes, typed and checked before anything runs.

A spec names a model, a grid of parameters, a time discretisation and a number of trajectories
per grid cell. The building blocks every model's spec class is made of live in modules of their
own, which know nothing of the models (a plug-in imports them):

    base        SweepBase (the fields every sweep has), Grid, Time, Strict; axis_values, refuse
    starts      the shared start field `init` (StartSweep), its checks, a partition's starts
    recording   the observables over time a sweep may record (RecordingSweep), output shapes
    matrices    explicit d x d matrices (one, or one per attention head)
    scales      a spec at the paper's sizes (`scales: {paper: ...}`)

and `load` turns plain data, a YAML file or a catalog name into the spec class of the model it
names (through the registry, `pipeline.models`), then checks the size of its store. This package
imports none of them, so that importing a building block never loads the registry.
"""
