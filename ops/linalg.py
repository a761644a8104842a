"""linalg (to be written)."""
