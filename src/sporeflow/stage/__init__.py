"""The stage layer: one stage of a job - its spec (a value), how its parts are built, the
Trainer that fits it with its hooks and writes its records, and the result it returns. It knows
no pipeline, no job run and no reuse (tests/unit/test_architecture.py checks the rule)."""
