"""tape.scipy.special: differentiable counterparts of scipy.special."""
