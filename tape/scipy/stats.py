"""tape.scipy.stats: differentiable counterparts of scipy.stats."""
