"""What several tests share: paths, running train.py, data files in real formats, MindSpore setup."""
