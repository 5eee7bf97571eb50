"""A trained network as a model others can load: the files of a packaged model (package) and
MLflow's python_function loader for them (pyfunc). No MLflow here: the tracking writer logs
the packaged directory, and MLflow imports `sporeflow.serving.pyfunc` only to load it."""
