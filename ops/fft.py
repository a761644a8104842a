"""np.fft: the discrete Fourier transforms as differentiable primitives."""
