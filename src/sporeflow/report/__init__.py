"""Report layer: paired statistics, the pipeline's comparison, a sweep's table, plots and UI
links. Reads the MLflow store (tracking) and what config says a sweep ranks by; no MindSpore."""
