"""Everyday numerical routines of NumPy (differences, integration, interpolation,
polynomials, convolution) as differentiable functions."""
