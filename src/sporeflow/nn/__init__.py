"""Library: losses, optimizer factories and learning-rate schedules for MindSpore, each argument
with its meaningful range (core/ranges.py) so a config that sets it is checked before work."""
