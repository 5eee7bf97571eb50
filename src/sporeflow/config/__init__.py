"""Config layer: the typed schema (one line per option: type, default, range), validation
before any work, building the user-swappable components, shard-strategy checks, and what a
sweep ranks jobs by. Imports the library (to check `_target_`s), storage and core."""
