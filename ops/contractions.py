"""contractions (to be written)."""
