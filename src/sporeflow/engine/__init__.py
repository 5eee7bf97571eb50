"""Training math and its MindSpore callbacks: the stage runner, callbacks, (later) custom cells."""
