"""Tracking layer: the MLflow client that never costs a training run. Imports no MindSpore and
no Hydra; the engine never imports it (stage/writer.py sends the engine's events)."""
