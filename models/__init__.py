"""The Nested-Learning model, optimizer, data and training loop (built in a later issue)."""
