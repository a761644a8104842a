"""tape.scipy.signal: differentiable counterparts of scipy.signal."""
