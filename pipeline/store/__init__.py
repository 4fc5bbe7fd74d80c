"""The result cube: one zarr v3 store per sweep, and everything that reads or writes one.

    layout      the schema: variables, dimensions, chunks, CF attributes, fill values
    cube        create a store, read its spec and per-partition tables, open it, its provenance
    compat      whether a store can take a spec: differences refused, growth allowed
    chunks      THE writer of partition chunks (a partition, a batch, a grow's copy)
    grow        growing a cube by a spec that only adds to it (crash-safe swap); marks: its names
    lifecycle   prepare_store: create, resume or grow, under the store's lock
    lock        the store's lock
    failures    the errors of failed partitions, kept beside the store
    location    local paths and object-store URLs
    provenance  the versions of the software that wrote a store
    reading     `tokensweep.open`: a cube for reading, masked by status

This package imports none of them, so that importing one never loads the others.
"""
