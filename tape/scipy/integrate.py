"""tape.scipy.integrate: differentiable counterparts of scipy.integrate."""
