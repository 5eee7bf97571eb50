"""Networks by name. Any nn.Cell reachable by `_target_` works as well (see README)."""
