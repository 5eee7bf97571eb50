"""Networks by name. Any nn.Cell reachable by `_target_` works as well (docs/components.md)."""
