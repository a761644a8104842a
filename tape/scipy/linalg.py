"""tape.scipy.linalg: differentiable counterparts of scipy.linalg."""
